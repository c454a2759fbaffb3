"""Categories (inferred from stacks and lifetimes) and compile contexts."""

from __future__ import annotations

import pytest
from analysis_snapshots import BIG_SIZE, training_snapshot

import memlens
from memlens.analysis.categories import CATEGORIES, by_compile_context, categories, categorize
from memlens.errors import MemlensError


@pytest.fixture(scope="module")
def dev():
    return memlens.load(training_snapshot()).device(0)


def test_every_allocation_category(dev):
    cat, names = categorize(dev)
    by_addr_event = {
        (int(dev.alloc_addr[r]), int(dev.alloc_event[r])): names[cat[r]]
        for r in range(dev.n_allocations)
    }
    assert by_addr_event == {
        (0x100000, -1): "parameter",  # ghost, alive throughout
        (0x100400, 0): "activation",  # freed after backward began
        (0x100800, 1): "temporary",  # freed before any backward event
        (0x100C00, 4): "gradient",  # made in backward, alive at the end
        (0x101000, 7): "other",  # forward, never freed
        (0x101400, 8): "optimizer_state",
        (0x100400, 9): "activation",
        (0x200000, 11): "temporary",
        (0x100800, 14): "autograd",  # made and freed in backward
        (0x101800, 19): "other",
        (0x101C00, 21): "other",
    }


def test_categories_at_peak_and_curves(dev):
    r = categories(dev, top=2)
    assert r["event"] == 11
    got = {c["name"]: (c["bytes"], c["peak_bytes"], c["peak_event"], c["allocated_bytes"])
           for c in r["categories"]}  # fmt: skip
    assert got == {
        "parameter": (1000, 1000, -1, 0),
        "gradient": (200, 200, 4, 200),
        "optimizer_state": (300, 300, 8, 300),
        "activation": (100, 100, 0, 200),
        "temporary": (BIG_SIZE, BIG_SIZE, 11, BIG_SIZE + 50),
        "autograd": (0, 30, 14, 30),
        "other": (10, 25, 21, 25),
    }
    assert sum(c["bytes"] for c in r["categories"]) == r["active_bytes"]
    curve = r["curve"]
    assert curve["event"] == list(range(22))  # small trace: every event sampled
    totals = [sum(curve["bytes"][n][i] for n in CATEGORIES) for i in range(22)]
    assert totals == dev.active_after.tolist()
    assert r["categories"][4]["top_sites"][0]["site"] == "forward (/home/u/model.py:20)"


def test_overrides_come_first(dev):
    r = categories(dev, overrides=[("model", r"model\.py"), ("gradient", "MmBackward")])
    got = {c["name"]: c["bytes"] for c in r["categories"]}
    assert got["model"] == 100 + BIG_SIZE + 10 and got["temporary"] == 0
    assert got["gradient"] == 200
    with pytest.raises(MemlensError, match="bad regex"):
        categorize(dev, overrides=[("x", "(")])


def test_compile_context():
    snap = training_snapshot()
    for i, e in enumerate(snap["device_traces"][0]):
        e["compile_context"] = "Torch-Compiled Region: 0/0" if 9 <= i <= 13 else "N/A"
    r = by_compile_context(memlens.load(snap).device(0))
    assert r["has_context"] and r["event"] == 11
    got = {c["context"]: (c["bytes"], c["allocated_bytes"]) for c in r["contexts"]}
    assert got == {
        "Torch-Compiled Region: 0/0": (100 + BIG_SIZE, 100 + BIG_SIZE),
        "<before trace>": (1000, 0),
        "N/A": (510, 100 + 50 + 200 + 10 + 300 + 30 + 10 + 5),
    }


def test_real_categories_add_up(shared_snapshots_dir, expected_figures):
    for name, exp in expected_figures.items():
        dev = memlens.load(shared_snapshots_dir / name).device(exp["device"])
        r = categories(dev, top=0, points=50)
        assert sum(c["bytes"] for c in r["categories"]) == exp["peak_active_bytes"]
        if "fullstep" in name:
            got = {c["name"]: c["bytes"] for c in r["categories"]}
            # AdamW keeps two moments per parameter: twice the parameters' bytes
            assert abs(got["optimizer_state"] - 2 * got["parameter"]) < 0.01 * got["parameter"]
            assert got["gradient"] > 0

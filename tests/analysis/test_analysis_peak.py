"""Peak and "memory at": exact live sets, sites, trees and allocation lookups."""

from __future__ import annotations

import pytest
from analysis_snapshots import BIG_SIZE, A, G, training_snapshot

import memlens
from memlens.analysis.peak import (
    Point,
    live_set,
    memory_at_allocation,
    parse_address,
    peak,
    resolve_event,
)
from memlens.analysis.sites import NO_PYTHON_LABEL
from memlens.errors import MemlensError
from snapshot_builders import hand_snapshot


@pytest.fixture(scope="module")
def dev():
    return memlens.load(training_snapshot()).device(0)


def test_peak_totals_and_sites(dev):
    r = peak(dev)
    assert r["event"] == 11
    assert r["active_bytes"] == r["peak_active_bytes"] == 1000 + 200 + 10 + 300 + 100 + BIG_SIZE
    assert r["reserved_bytes"] == 3 * 1024 * 1024
    assert r["peak_reserved_bytes"] == 3 * 1024 * 1024 and r["peak_reserved_event"] == 10
    assert r["live_count"] == 6
    sites = {s["site"]: (s["bytes"], s["count"]) for s in r["by_site"]}
    assert sites == {
        "forward (/home/u/model.py:20)": (100 + BIG_SIZE + 10, 3),
        "<no stack recorded>": (1000, 1),
        "train (/home/u/train.py:50)": (300, 1),
        "torch::autograd::generated::MmBackward0::apply": (200, 1),
    }
    assert [a["bytes"] for a in r["largest"]] == [BIG_SIZE, 1000, 300, 200, 100, 10]
    assert r["largest"][0]["address"] == "0x200000" and r["largest"][0]["alloc_event"] == 11


def test_peak_tree_python_view_has_totals_at_every_level(dev):
    t = peak(dev, tree_min_share=0)["tree"]
    assert t is not None
    assert t["bytes"] == dev.peak_active_bytes and t["count"] == 6
    kids = {c["label"]: c for c in t["children"]}
    train = kids["train (train.py:50)"]
    assert train["bytes"] == 100 + BIG_SIZE + 10 + 300 and train["count"] == 4
    # torch's _init_group is internal: its 300 bytes are train's own, as its site says
    assert {c["label"]: c["bytes"] for c in train["children"]} == {
        "forward (model.py:20)": 100 + BIG_SIZE + 10,
    }
    shown = peak(dev, tree_min_share=0, show_internal=True)["tree"]
    assert shown is not None
    train = next(c for c in shown["children"] if c["label"] == "train (train.py:50)")
    assert {c["label"]: c["bytes"] for c in train["children"]} == {
        "forward (model.py:20)": 100 + BIG_SIZE + 10,
        "_init_group (adam.py:100)": 300,
    }
    # backward allocations have no Python frame: grouped by their autograd node
    bw = kids[NO_PYTHON_LABEL]
    assert bw["bytes"] == 200
    assert [c["label"] for c in bw["children"]] == [
        "torch::autograd::generated::MmBackward0::apply"
    ]
    assert kids["<no stack recorded>"]["bytes"] == 1000


def test_tree_all_frames_and_pruning(dev):
    t = peak(dev, python_only=False, tree_min_share=0)["tree"]
    assert t is not None
    labels = [c["label"] for c in t["children"]]
    assert "torch::autograd::Engine::evaluate_function (??)" not in labels  # '??' file dropped
    assert any("Engine::evaluate_function" in lab for lab in labels)
    pruned = peak(dev, tree_min_share=0.5)["tree"]
    assert pruned is not None
    # everything under half the total is merged into one <other> node per level
    assert [c["label"] for c in pruned["children"]] == ["train (train.py:50)", "<other>"]
    assert pruned["children"][1]["bytes"] == 1200 and pruned["children"][1]["count"] == 2
    shallow = peak(dev, tree_depth=1)["tree"]
    assert shallow is not None and shallow["children"][0]["children"] == []


def test_live_set_before_first_event_is_the_baseline(dev):
    r = live_set(dev, -1)
    assert (r["active_bytes"], r["live_count"], r["time_us"], r["action"]) == (1000, 1, None, None)
    assert r["by_site"][0]["site"] == "<no stack recorded>"


def test_memory_at_allocation_alloc_and_free(dev):
    r = memory_at_allocation(dev, A, 1, "alloc")
    assert r["event"] == 9 and r["active_bytes"] == 1610 and r["live_count"] == 5
    assert r["allocation"]["bytes"] == 100 and r["allocation"]["free_event"] == 18
    r = memory_at_allocation(dev, A, 1, "free")
    assert r["event"] == 18 and r["active_bytes"] == 1510 and r["live_count"] == 4
    r = memory_at_allocation(dev, A, 0, "free")
    assert r["event"] == 6 and r["active_bytes"] == 1200


def test_allocation_errors(dev):
    with pytest.raises(MemlensError, match="2 allocations"):
        memory_at_allocation(dev, A)
    with pytest.raises(MemlensError, match="never freed"):
        memory_at_allocation(dev, G, when="free")
    with pytest.raises(MemlensError, match="no allocation"):
        memory_at_allocation(dev, 0xDEAD)
    with pytest.raises(MemlensError, match="no version 7"):
        memory_at_allocation(dev, A, 7)


def test_resolve_event(dev):
    assert resolve_event(dev, Point(event=5)) == 5
    assert resolve_event(dev, Point(time_us=1125)) == 11  # last event at or before the time
    assert resolve_event(dev, Point(time_us=999)) == -1
    assert resolve_event(dev, Point(addr=A, version=1, when="free")) == 18
    with pytest.raises(MemlensError):
        resolve_event(dev, Point(event=22))
    with pytest.raises(MemlensError):
        resolve_event(dev, Point(event=1, time_us=3))


def test_parse_address():
    assert parse_address("0x100400") == (0x100400, None)
    assert parse_address("0x100400_1") == (0x100400, 1)
    assert parse_address("b'100400_2'") == (0x100400, 2)
    with pytest.raises(MemlensError):
        parse_address("zz")


def test_real_peak_matches_expected(shared_snapshots_dir, expected_figures):
    for name, exp in expected_figures.items():
        dev = memlens.load(shared_snapshots_dir / name).device(exp["device"])
        r = peak(dev, top=5)
        assert r["event"] == exp["peak_event_index"]
        assert r["active_bytes"] == exp["peak_active_bytes"]
        assert r["tree"] is not None
        assert r["tree"]["bytes"] == exp["peak_active_bytes"]
        # the python view of the tree loses no bytes
        assert sum(c["bytes"] for c in r["tree"]["children"]) == exp["peak_active_bytes"]


def test_trace_recorded_without_stacks():
    """context=None in _record_memory_history: no frames anywhere, so no stack table at all."""
    snap = memlens.load(hand_snapshot(), cache=False)
    raw = hand_snapshot()
    for e in raw["device_traces"][0]:
        e["frames"] = []
    for seg in raw["segments"]:
        for b in seg["blocks"]:
            b["frames"] = []
    bare = memlens.load(raw, cache=False).device(0)
    assert len(bare.snapshot.stacks.offsets) <= 1  # no stack recorded
    for python_only in (True, False):
        r = live_set(bare, bare.peak_event_index, python_only=python_only)
        assert r["tree"] is not None
        assert r["tree"]["bytes"] == r["active_bytes"] == bare.peak_active_bytes
        assert [k["label"] for k in r["tree"]["children"]] == ["<no stack recorded>"]
    # the same figures as with stacks: stacks only name things
    assert bare.peak_active_bytes == snap.device(0).peak_active_bytes

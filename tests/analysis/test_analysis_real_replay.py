"""The real snapshots against a by-hand replay (tests/analysis/hand_replay.py): memory at an
allocation (address + version, alloc and free) and the live set at the peak; and `memlens
check` run as a real process on the two training-step files, as CI runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from hand_replay import HandReplay, read_raw

import memlens
from memlens.analysis.peak import live_set, memory_at_allocation

# timed and untimed, new and old formats (eor_nn_train has `snapshot` actions)
FILES = ["cs336_memory_ctx128_fullstep.pickle", "eor_nn_train.pickle", "ftcourse_finetune.pickle"]


def reused_allocation(hand: HandReplay) -> dict[str, Any]:
    """An allocation that is not the first at its address (version >= 2) and is freed in
    the trace, from the second half of it: the case where the version matters."""
    n = len(hand.trace)
    return next(a for a in hand.allocs
                if a["version"] >= 2 and a["free"] is not None and a["alloc"] > n // 2)  # fmt: skip


@pytest.mark.parametrize("name", FILES)
def test_memory_at_allocation_matches_hand_replay(shared_snapshots_dir, name):
    path = shared_snapshots_dir / name
    hand = HandReplay(read_raw(path))
    dev = memlens.load(path).device(0)
    a = reused_allocation(hand)
    for when, event in (("alloc", a["alloc"]), ("free", a["free"])):
        r = memory_at_allocation(dev, a["addr"], a["version"], when)
        live = hand.live_at(event)
        assert r["event"] == event
        assert r["active_bytes"] == hand.active_at(event) == sum(live)
        assert r["live_count"] == len(live)
        assert r["largest"][0]["bytes"] == max(live)
        assert r["allocation"]["bytes"] == a["size"]
        assert (r["allocation"]["alloc_event"], r["allocation"]["free_event"]) == (
            a["alloc"], a["free"])  # fmt: skip
    # right after its alloc it is live; right after its free it is not
    at_alloc = memory_at_allocation(dev, a["addr"], a["version"], "alloc")
    at_free = memory_at_allocation(dev, a["addr"], a["version"], "free")
    assert at_alloc["active_bytes"] - hand.active_at(a["alloc"] - 1) == a["size"]
    assert hand.active_at(a["free"] - 1) - at_free["active_bytes"] == a["size"]


@pytest.mark.parametrize("name", FILES)
def test_live_set_at_the_peak_matches_hand_replay(shared_snapshots_dir, name, expected_figures):
    path = shared_snapshots_dir / name
    hand = HandReplay(read_raw(path))
    peak = max([hand.baseline, *hand.active])
    first = next((i for i, v in enumerate(hand.active) if v == peak), -1)
    assert (peak, first) == (
        expected_figures[name]["peak_active_bytes"], expected_figures[name]["peak_event_index"])  # fmt: skip
    r = live_set(memlens.load(path).device(0), first)
    live = hand.live_at(first)
    assert (r["active_bytes"], r["live_count"]) == (sum(live), len(live))
    assert sum(s["bytes"] for s in r["by_site"]) <= r["active_bytes"]
    assert r["tree"] is not None
    assert r["tree"]["bytes"] == r["active_bytes"] and r["tree"]["count"] == len(live)


def memlens_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memlens", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_check_as_a_process_on_the_training_steps(shared_snapshots_dir, expected_figures):
    old = "cs336_memory_ctx128_fullstep.pickle"
    new = "cs336_memory_ctx256_fullstep.pickle"
    a, b = str(shared_snapshots_dir / old), str(shared_snapshots_dir / new)
    peak_b = expected_figures[new]["peak_active_bytes"]
    growth = peak_b - expected_figures[old]["peak_active_bytes"]  # 20.79 MiB, +0.04%
    # sizes in bytes say so (a bare number warns: memlens check --max-peak 20)
    ok = memlens_cli("check", b, "--max-peak", f"{peak_b}B", "--baseline", a, "--max-growth",
                     f"{growth}B")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "all budgets met" in ok.stdout and ok.stderr == ""
    over = memlens_cli("check", b, "--max-peak", f"{peak_b - 1}B")
    assert over.returncode == 1
    assert over.stderr.splitlines()[0] == (
        f"FAIL: device 0: peak active memory 51.06 GiB ({peak_b:,} bytes) exceeds the budget "
        f"of 51.06 GiB ({peak_b - 1:,} bytes) by 1 B")  # fmt: skip
    grew = memlens_cli("check", b, "--baseline", a, "--max-growth", "0.01%", "--json")
    assert grew.returncode == 1
    (dev,) = json.loads(grew.stdout)["devices"]
    assert dev["checks"][0]["growth_bytes"] == growth and not dev["ok"]
    bad = memlens_cli("check", b, "--max-growth", "5%")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "memlens: error: --max-growth needs --baseline OLD.pickle"

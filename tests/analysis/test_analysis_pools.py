"""The memory pool of a segment and of an allocation at any event (allocator_state):
from the trace entries' pool_id when recorded, else the final segments, else unknown
(None), never a guessed (0, 0). Worked on snapshot_builders.pool_snapshot by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import memlens
from memlens.analysis.allocator_state import (
    SegmentIntervals,
    SegmentWalker,
    allocation_pool,
    pool_at,
    state_at,
)
from memlens.snapshot.model import DeviceTrace
from memlens.views.web.allocator_view import allocator_state
from snapshot_builders import MiB, ev, pool_snapshot

S0, S1 = 0x100000, 0x400000


def _dev(pool_ids: bool = True) -> DeviceTrace:
    return memlens.load(pool_snapshot(pool_ids), cache=False).device(0)


def _pools(dev: DeviceTrace, event: int) -> list[tuple[str, Any]]:
    return [(s["address"], s["pool"]) for s in state_at(dev, event)["segments"]]


def _row(dev: DeviceTrace, alloc_event: int) -> int:
    return int(np.flatnonzero(dev.alloc_event == alloc_event)[0])


def test_a_private_segment_freed_mid_trace_keeps_its_pool():
    dev = _dev()
    assert _pools(dev, -1) == []
    assert _pools(dev, 1) == [("0x100000", [0, 0]), ("0x400000", [1, 0])]
    assert _pools(dev, 4) == [("0x100000", [0, 0]), ("0x400000", [1, 0])]
    assert _pools(dev, 5) == [("0x100000", [0, 0])]
    # the default-pool segment made at S1's address afterwards is default
    assert _pools(dev, 8) == [("0x100000", [0, 0]), ("0x400000", [0, 0])]
    # A (in S1) is the graph pool's, B and C the default pool's
    assert allocation_pool(dev, _row(dev, 2)) == [1, 0]
    assert allocation_pool(dev, _row(dev, 6)) == [0, 0]
    assert allocation_pool(dev, _row(dev, 8)) == [0, 0]
    snap = dev.snapshot
    assert pool_at(snap, 0, S1 + 100, 3) == [1, 0]
    assert pool_at(snap, 0, S1 + 100, 6) is None  # no segment there then
    assert pool_at(snap, 0, S1 + 100) == [0, 0]  # the final state
    assert pool_at(snap, 0, S0 + 2 * MiB) is None  # past every segment


def test_without_pool_id_a_freed_segment_is_unknown():
    dev = _dev(pool_ids=False)
    # S0 lives to the end: its final segment_pool_id; S1 was freed: unknown
    assert _pools(dev, 4) == [("0x100000", [0, 0]), ("0x400000", None)]
    assert _pools(dev, 8) == [("0x100000", [0, 0]), ("0x400000", [0, 0])]
    # A's segment is gone by the end (the final segment at its address is another one,
    # of the default pool: not A's)
    assert allocation_pool(dev, _row(dev, 2)) is None
    assert allocation_pool(dev, _row(dev, 6)) == [0, 0]
    assert allocation_pool(dev, _row(dev, 8)) == [0, 0]
    assert pool_at(dev.snapshot, 0, S1, 3) is None


@pytest.mark.parametrize("pool_ids", [True, False])
def test_walker_and_intervals_agree(pool_ids):
    dev = _dev(pool_ids)
    fast, walk = SegmentIntervals(dev), SegmentWalker(dev)
    for e in range(dev.n_events - 1, -2, -1):
        fast.rewind_to(e)
        walk.rewind_to(e)
        assert fast.pools() == walk.pools(), e


def _expandable(pool_ids: bool) -> dict[str, Any]:
    """A graph pool's expandable segment mapped, used and unmapped (no final segments)."""
    X, P = 0x1000000, (2, 0)
    trace = [
        ev("segment_map", X, 2 * MiB, 0, pool_id=P),
        ev("alloc", X, 100, 1, pool_id=P),
        ev("free_requested", X, 100, 2, pool_id=P),
        ev("free_completed", X, 100, 3, pool_id=P),
        ev("segment_unmap", X, 2 * MiB, 4, pool_id=P),
    ]
    if not pool_ids:
        for e in trace:
            del e["pool_id"]
    return {"segments": [], "device_traces": [trace]}


def test_expandable_segments_unmapped_before_the_end():
    dev = memlens.load(_expandable(True), cache=False).device(0)
    assert _pools(dev, 1) == [("0x1000000", [2, 0])]
    assert allocation_pool(dev, 0) == [2, 0]
    old = memlens.load(_expandable(False), cache=False).device(0)
    assert _pools(old, 1) == [("0x1000000", None)]
    assert allocation_pool(old, 0) is None


def test_viewer_says_the_pool_or_unknown():
    testclient = pytest.importorskip("starlette.testclient")
    from memlens.views.web.data import ViewerData
    from memlens.views.web.server import create_app

    dev = _dev()
    card = allocator_state(dev, 4)
    assert [s["pool"] for s in card["segments"]] == [[0, 0], [1, 0]]
    old = _dev(pool_ids=False)
    assert [s["pool"] for s in allocator_state(old, 4)["segments"]] == [[0, 0], None]
    for d, want in ((dev, [1, 0]), (old, None)):
        c = testclient.TestClient(create_app(ViewerData([d.snapshot])), base_url="http://127.0.0.1")
        assert c.get(f"/api/d/0/alloc/{_row(d, 2)}").json()["pool"] == want

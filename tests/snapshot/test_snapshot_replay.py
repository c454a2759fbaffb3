"""Exact replay figures on the hand-built example of docs/concepts.md."""

from __future__ import annotations

import numpy as np
import pytest

import memlens
from memlens.snapshot.model import GHOST, LIVE_AT_END, PREEXISTING
from snapshot_builders import STACK, MiB, block, ev, hand_snapshot, segment


@pytest.fixture
def dev():
    return memlens.load(hand_snapshot()).device(0)


def test_active_curve_by_hand(dev):
    # baseline: orphan C (50) + ghost G (1000)
    assert dev.baseline_bytes == 1050
    assert dev.active_after.tolist() == [1050, 1150, 1350, 1350, 1250, 1200, 1500, 1500, 1510, 1310]
    assert dev.peak_active_bytes == 1510
    assert dev.peak_event_index == 8
    assert dev.end_active_bytes == 1310


def test_reserved_curve_anchored_on_final_segments(dev):
    assert dev.end_reserved_bytes == 2 * MiB
    assert dev.reserved_start_bytes == 0
    assert dev.reserved_after.tolist() == [2 * MiB] * 10
    assert dev.peak_reserved_bytes == 2 * MiB
    assert dev.peak_reserved_event_index == 0


def test_allocation_rows(dev):
    # ghosts first, then allocations that predate the trace, then allocs in trace order
    assert dev.alloc_event.tolist() == [-1, -1, 1, 2, 6, 8]
    assert dev.free_event.tolist() == [10, 5, 4, 9, 10, 10]
    assert dev.free_requested_event.tolist() == [-1, -1, 3, 7, -1, -1]
    assert dev.alloc_size.tolist() == [1000, 50, 100, 200, 300, 10]
    assert dev.alloc_addr.tolist() == [0x11000, 0x10800, 0x10000, 0x10400, 0x10000, 0x10C00]
    assert dev.alloc_version.tolist() == [0, 0, 0, 0, 1, 0]
    assert dev.alloc_flags.tolist() == [
        PREEXISTING | GHOST | LIVE_AT_END, PREEXISTING, 0, 0, LIVE_AT_END, LIVE_AT_END,
    ]  # fmt: skip


def test_per_event_version_and_row(dev):
    assert dev.version.tolist() == [-1, 0, 0, 0, 0, 0, 1, 0, 0, 0]
    assert dev.alloc_row.tolist() == [-1, 2, 3, 2, 2, 1, 4, 3, 5, 3]


def test_pending_free_still_holds_memory(dev):
    # B was requested free at 7 and completed at 9: alive in between
    live7 = set(dev.live_at(7).tolist())
    assert 3 in live7
    assert 3 not in set(dev.live_at(9).tolist())


def test_memory_and_live_set_at_events(dev):
    assert dev.active_at(-1) == 1050
    assert dev.active_at(5) == 1200
    assert sorted(dev.live_at(5).tolist()) == [0, 3]  # G and B
    assert sorted(dev.live_at(-1).tolist()) == [0, 1]  # G and C before anything happened
    assert sorted(dev.live_at(9).tolist()) == [0, 4, 5]
    assert int(dev.alloc_size[dev.live_at(9)].sum()) == dev.end_active_bytes
    with pytest.raises(IndexError):
        dev.active_at(10)
    with pytest.raises(IndexError):
        dev.live_at(-2)


def test_event_at_time(dev):
    assert dev.event_at_time(1000) == 0
    assert dev.event_at_time(1005) == 5
    assert dev.event_at_time(999) == -1
    assert dev.event_at_time(10**9) == 9


def test_alloc_over_open_address_keeps_earlier_alive_like_memoryviz():
    snap = {
        "segments": [],
        "device_traces": [
            [ev("alloc", 0x100, 10), ev("alloc", 0x100, 20), ev("free_completed", 0x100, 20)]
        ],
    }
    with pytest.warns(memlens.snapshot.loader.SnapshotWarning, match="still in use"):
        d = memlens.load(snap).device(0)
    assert d.active_after.tolist() == [10, 30, 10]


def test_free_requested_only_traces_use_requests_as_frees():
    snap = {
        "segments": [],
        "device_traces": [[ev("alloc", 0x100, 10), ev("free_requested", 0x100, 10)]],
    }
    with pytest.warns(memlens.snapshot.loader.SnapshotWarning, match="free_requested taken"):
        d = memlens.load(snap).device(0)
    assert d.active_after.tolist() == [10, 0]
    assert d.frees_from_requested


def test_no_segments_reserved_starts_at_zero_or_lowest_valid():
    snap = {
        "segments": [],
        "device_traces": [
            [ev("segment_free", 0x1000, 2 * MiB), ev("segment_alloc", 0x1000, 4 * MiB)]
        ],
    }
    d = memlens.load(snap).device(0)
    assert d.reserved_start_bytes == 2 * MiB
    assert d.reserved_after.tolist() == [0, 4 * MiB]


def test_expandable_segments_map_unmap_reserved():
    seg = segment(
        0x1000,
        [block(0x1000, 20 * MiB, 20 * MiB, "inactive")],
        segment_type="large",
        is_expandable=True,
    )
    trace = [
        ev("segment_map", 0x1000, 20 * MiB),
        ev("segment_map", 0x1000 + 20 * MiB, 20 * MiB),
        ev("segment_unmap", 0x1000 + 20 * MiB, 20 * MiB),
    ]
    d = memlens.load({"segments": [seg], "device_traces": [trace]}).device(0)
    assert d.reserved_start_bytes == 0
    assert d.reserved_after.tolist() == [20 * MiB, 40 * MiB, 20 * MiB]
    assert d.peak_reserved_bytes == 40 * MiB
    assert d.peak_reserved_event_index == 1


def test_pending_free_block_in_final_state_is_not_a_ghost():
    seg = segment(
        0x1000,
        [
            block(0x1000, 512, 100, "active_pending_free", STACK),
            block(0x1200, 512, 512, "inactive"),
        ],
    )
    trace = [
        ev("alloc", 0x1000, 100),
        ev("free_requested", 0x1000, 100),
        ev("alloc", 0x1200, 7),
        ev("free_completed", 0x1200, 7),
    ]
    d = memlens.load({"segments": [seg], "device_traces": [trace]}).device(0)
    assert d.end_active_bytes == 100
    assert d.alloc_flags[0] & LIVE_AT_END
    assert d.free_requested_event.tolist() == [1, -1]
    assert np.count_nonzero(d.alloc_flags & GHOST) == 0

"""The real snapshots in ../shared/snapshots: published figures, MemoryViz parity, invariant."""

from __future__ import annotations

import numpy as np
import pytest

import memlens
from memlens.snapshot.read.safe_pickle import load_plain_pickle
from shared_data import real_snapshot_names
from snapshot_reference import memoryviz_replay, naive_reserved

NAMES = real_snapshot_names()
pytestmark = pytest.mark.skipif(not NAMES, reason="../shared/snapshots is absent")


@pytest.fixture(scope="module")
def loaded(shared_snapshots_dir):
    return {n: memlens.load(shared_snapshots_dir / n) for n in NAMES}


@pytest.mark.parametrize("name", NAMES)
def test_published_figures(loaded, expected_figures, name):
    exp = expected_figures[name]
    d = loaded[name].device(exp["device"])
    got = {
        "device": d.device,
        "trace_entries": d.n_events,
        "baseline_bytes": d.baseline_bytes,
        "peak_active_bytes": d.peak_active_bytes,
        "peak_event_index": d.peak_event_index,
        "end_active_bytes": d.end_active_bytes,
        "reserved_start_bytes": d.reserved_start_bytes,
        "peak_reserved_bytes": d.peak_reserved_bytes,
        "end_reserved_bytes": d.end_reserved_bytes,
    }
    assert got == exp


@pytest.mark.parametrize("name", NAMES)
def test_active_curve_equals_memoryviz_event_by_event(shared_snapshots_dir, loaded, name):
    with open(shared_snapshots_dir / name, "rb") as fh:
        raw = load_plain_pickle(fh)
    ref = memoryviz_replay(raw, 0)
    d = loaded[name].device(0)
    assert d.baseline_bytes == ref["baseline"]
    assert d.active_after.tolist() == ref["active_after"]
    assert d.peak_active_bytes == max(ref["max_size"], ref["baseline"])
    start, reserved = naive_reserved(raw, 0)
    assert d.reserved_start_bytes == start and d.reserved_after.tolist() == reserved


@pytest.mark.parametrize("name", NAMES)
def test_end_of_replay_matches_final_segments(loaded, name):
    snap = loaded[name]
    for dev_id in snap.devices:
        d = snap.device(dev_id)
        seg = snap.segments
        rows = seg.of_device(dev_id)
        blk = np.concatenate(
            [np.arange(seg.block_offsets[r], seg.block_offsets[r + 1]) for r in rows]
        )
        state = seg.block_state[blk]
        want = sorted(
            zip(
                seg.block_address[blk][state > 0].tolist(),
                seg.block_requested_size[blk][state > 0].tolist(),
            )
        )
        live = d.live_at(d.n_events - 1)
        got = sorted(zip(d.alloc_addr[live].tolist(), d.alloc_size[live].tolist()))
        assert got == want
        assert d.end_reserved_bytes == int(seg.total_size[rows].sum())


def test_live_set_at_peak_sums_to_peak(loaded):
    for snap in loaded.values():
        d = snap.device(0)
        assert int(d.alloc_size[d.live_at(d.peak_event_index)].sum()) == d.peak_active_bytes

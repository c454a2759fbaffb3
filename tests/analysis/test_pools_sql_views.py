"""`summary`'s bytes per pool at the peak, the pool columns of `sql`'s events and
allocations, and its views for the common questions (live_at, free_gaps), on
snapshot_builders.pool_snapshot and hand_snapshot, worked by hand from their comments."""

from __future__ import annotations

from typing import Any

import pytest

import memlens
from memlens.analysis.pools import pool_bytes_at
from memlens.analysis.summary import summarize
from snapshot_builders import MiB, hand_snapshot, pool_snapshot

pytest.importorskip("duckdb")
from memlens.analysis.sql import query  # noqa: E402


def rows(snap: memlens.Snapshot, sql: str) -> list[list[Any]]:
    return query(snap, sql)["rows"]


@pytest.mark.parametrize("pool_ids", [True, False])
def test_summary_pools_at_the_peak(pool_ids):
    snap = memlens.load(pool_snapshot(pool_ids), cache=False)
    (dev_summary,) = summarize(snap)["devices"]
    # the peak is A alone (1000 B, event 2), in the graph pool's segment S1; S1 is freed
    # before the end, so without pool_id in the trace its pool is unknown
    assert dev_summary["peak_event_index"] == 2
    pool = [1, 0] if pool_ids else None
    assert dev_summary["pools_at_peak"] == [{"pool": pool, "bytes": 1000, "count": 1}]
    # after event 8: B (100 B, S0) and C (200 B, S2 at S1's address): both default
    dev = snap.device(0)
    assert pool_bytes_at(dev, 8) == [{"pool": [0, 0], "bytes": 300, "count": 2}]
    assert pool_bytes_at(dev, -1) == []


def test_sql_pool_columns():
    snap = memlens.load(pool_snapshot(), cache=False)
    assert rows(snap, "select idx, pool_id0, pool_id1 from events where idx in (1, 2, 6)") == [
        [1, 1, 0], [2, 1, 0], [6, 0, 0]
    ]  # fmt: skip
    assert rows(snap, "select row, size, pool_id0, pool_id1 from allocations order by row") == [
        [0, 1000, 1, 0], [1, 100, 0, 0], [2, 200, 0, 0]
    ]  # fmt: skip
    bare = memlens.load(pool_snapshot(pool_ids=False), cache=False)
    assert rows(bare, "select count(*) from events where pool_id0 is not null") == [[0]]


def test_live_at_an_event_with_call_sites():
    snap = memlens.load(hand_snapshot(), cache=False)
    # docs/concepts.md's worked example, after event 8: A v1 (300), D (10), G (ghost, 1000)
    # and B (200, freed at 9); C was freed at 5
    got = rows(snap, "select addr, version, size, site from live_at(0, 8)")
    assert got == [
        [0x11000, 0, 1000, "train_step (/home/u/train.py:10)"],  # G: its block's frames
        [0x10000, 1, 300, "train_step (/home/u/train.py:10)"],
        [0x10400, 0, 200, "train_step (/home/u/train.py:10)"],
        [0x10C00, 0, 10, "train_step (/home/u/train.py:10)"],
    ]
    assert rows(snap, "select sum(size) from live_at(0, 8)") == [[snap.device(0).active_after[8]]]


def test_free_gaps_are_the_inactive_blocks_largest_first():
    snap = memlens.load(hand_snapshot(), cache=False)
    got = rows(snap, "select address, size, pool_id0, pool_id1, segment_type from free_gaps")
    assert got == [
        [0x11400, 2 * MiB - 5120, 0, 0, "small"],
        [0x10400, 1024, 0, 0, "small"],
        [0x10800, 1024, 0, 0, "small"],
        [0x10200, 512, 0, 0, "small"],
    ]

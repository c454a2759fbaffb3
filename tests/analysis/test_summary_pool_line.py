"""`memlens summary`'s pools at the peak when the trace does not record every pool: the
text's line and the JSON's `private_pools`, on snapshot_builders.pool_snapshot and
hand_snapshot, worked from their comments."""

from __future__ import annotations

from typing import Any

import memlens
from memlens.analysis.results import PoolBytes
from memlens.analysis.summary import summarize
from memlens.views.text.summary import pools_worth_a_line, render_summary
from snapshot_builders import hand_snapshot, pool_snapshot


def pool_lines(raw: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    s = summarize(memlens.load(raw, cache=False))
    text = render_summary(s)
    return [ln for ln in text.splitlines() if "pool" in ln], dict(s["devices"][0])


def test_a_trace_without_pool_ids_whose_segments_are_all_default_has_no_pool_line():
    # A (1000 B, the peak) sat in S1, freed before the end; the final segments are both in
    # the default pool and no entry carries pool_id: nothing names a private pool
    lines, d = pool_lines(pool_snapshot(pool_ids=False))
    assert lines == []  # was "pools at peak    unknown 1000 B"
    assert d["pools_at_peak"] == [{"pool": None, "bytes": 1000, "count": 1}]
    assert d["private_pools"] == []


def test_a_snapshot_without_segments_or_pool_ids_has_no_pool_line():
    raw = hand_snapshot()
    raw["segments"] = []
    lines, d = pool_lines(raw)
    assert lines == []
    # the peak, after event 8 (hand_snapshot's comments): B 200 B (its free not completed
    # until event 9), A's second version 300 B and D 10 B; no segment to ask
    assert d["pools_at_peak"] == [{"pool": None, "bytes": 510, "count": 3}]
    assert d["private_pools"] == []


def test_a_recorded_private_pool_at_the_peak_is_named():
    lines, d = pool_lines(pool_snapshot())
    assert lines == ["  pools at peak    (1, 0) 1000 B"]
    assert d["private_pools"] == [[1, 0]]


def test_unrecorded_bytes_are_shown_when_the_snapshot_names_a_private_pool():
    # the same trace without pool_id, but the final S0 is a MemPool's (2, 5): A's freed
    # segment may have been a private one too, so its 1000 B are worth a word
    raw = pool_snapshot(pool_ids=False)
    raw["segments"][0]["segment_pool_id"] = (2, 5)
    lines, d = pool_lines(raw)
    assert lines == ["  pools at peak    pool not recorded 1000 B"]
    assert d["pools_at_peak"] == [{"pool": None, "bytes": 1000, "count": 1}]
    assert d["private_pools"] == [[2, 5]]


def test_the_rule():
    default: PoolBytes = {"pool": [0, 0], "bytes": 5, "count": 1}
    unknown: PoolBytes = {"pool": None, "bytes": 7, "count": 1}
    graph: PoolBytes = {"pool": [1, 0], "bytes": 3, "count": 1}
    assert not pools_worth_a_line([default], [])
    assert not pools_worth_a_line([default, unknown], [])
    assert not pools_worth_a_line([default], [[1, 0]])
    assert pools_worth_a_line([default, unknown], [[1, 0]])
    assert pools_worth_a_line([graph, default], [[1, 0]])
    assert not pools_worth_a_line([], [[1, 0]])

"""Memory per group over time: one exact cumulative curve per group of allocations.

Used by categories, rules and anything else that splits the active curve. Each group's
curve is exact (a cumsum of its own +size/-size deltas); the returned points are thinned
to buckets, and each point is the group's highest value in its bucket (the events after
the previous point up to its own), so a training loop's steps stay flat and a peak
shorter than a bucket still shows. Where every event is a point, each is the exact value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypedDict

import numpy as np

from memlens.analysis.events import sample_events
from memlens.analysis.results import Curve, GroupRow
from memlens.analysis.sites import top_sites
from memlens.snapshot.model import DeviceTrace


def _deltas(dev: DeviceTrace, allocs: np.ndarray, frees: np.ndarray, n: int) -> np.ndarray:
    # bincount weights go through float64: exact below 2**53 bytes per event
    up = np.bincount(dev.alloc_event[allocs], weights=dev.alloc_size[allocs], minlength=n)
    down = np.bincount(dev.free_event[frees], weights=dev.alloc_size[frees], minlength=n)
    return (up[:n] - down[:n]).astype(np.int64)


class _GroupCurves(TypedDict):
    event: list[int]
    bytes: list[list[int]]  # per group
    peak_bytes: list[int]
    peak_event: list[int]


def bucket_max(curve: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per point i: the highest of curve[ends[i-1] + 1 .. ends[i]] (from 0 for the first);
    `ends` sorted, unique, inside the curve."""
    if len(ends) == 0:
        return curve[:0]
    starts = np.r_[0, ends[:-1] + 1]
    out: np.ndarray = np.maximum.reduceat(curve[: ends[-1] + 1], starts)
    return out


def group_curves(
    dev: DeviceTrace,
    group: np.ndarray,
    n_groups: int,
    *,
    points: int = 400,
    must: tuple[int, ...] = (),
) -> _GroupCurves:
    """Per-group active bytes over the trace: {"event": [...] (each bucket's last event),
    "bytes": [[g0...], [g1...], ...] (the group's highest value in the bucket)} plus each
    group's exact peak ("peak_bytes", "peak_event")."""
    n = dev.n_events
    ev = sample_events(n, points, must)
    base = np.zeros(n_groups, dtype=np.int64)
    pre = dev.alloc_event < 0
    np.add.at(base, group[pre], dev.alloc_size[pre])
    series: list[list[int]] = []
    peak_bytes: list[int] = []
    peak_event: list[int] = []
    a_ok = dev.alloc_event >= 0
    f_ok = dev.free_event < n
    for g in range(n_groups):
        mine = group == g
        curve = int(base[g]) + np.cumsum(_deltas(dev, mine & a_ok, mine & f_ok, n))
        series.append(bucket_max(curve, ev).tolist())
        if n and int(curve.max()) > int(base[g]):
            i = int(np.argmax(curve))
            peak_bytes.append(int(curve[i]))
            peak_event.append(i)
        else:
            peak_bytes.append(int(base[g]))
            peak_event.append(-1)
    return {
        "event": ev.tolist(),
        "bytes": series,
        "peak_bytes": peak_bytes,
        "peak_event": peak_event,
    }


def group_totals(
    dev: DeviceTrace, group: np.ndarray, n_groups: int, event: int
) -> dict[str, np.ndarray]:
    """Per group: bytes and count live right after `event`, and bytes and count allocated
    by the trace's own events (allocations made before the trace are not counted)."""
    rows = dev.live_at(event)
    made = dev.alloc_event >= 0
    return {
        "rows": rows,
        "bytes": np.bincount(group[rows], weights=dev.alloc_size[rows], minlength=n_groups),
        "count": np.bincount(group[rows], minlength=n_groups),
        "allocated_bytes": np.bincount(
            group[made], weights=dev.alloc_size[made], minlength=n_groups
        ),
        "allocated_count": np.bincount(group[made], minlength=n_groups),
    }


def group_summary(
    dev: DeviceTrace,
    group: np.ndarray,
    names: Sequence[str],
    *,
    event: int,
    points: int = 400,
    top: int = 3,
    hide_patterns: Sequence[str] | None = None,
) -> tuple[list[GroupRow], Curve]:
    """What categories and rules both report for a split of the allocations into named
    groups: per group {"name", "bytes", "count" (live at `event`), "peak_bytes",
    "peak_event" (its own exact peak), "allocated_bytes", "allocated_count", "top_sites"
    (at `event`; [] when top is 0)}, and the sampled curve {"event", "bytes": {name: [...]}}.
    """
    k = len(names)
    totals = group_totals(dev, group, k, event)
    rows = totals["rows"]
    curves = group_curves(dev, group, k, points=points, must=(max(event, 0),))
    items: list[GroupRow] = []
    for g, name in enumerate(names):
        sites = (
            top_sites(dev, rows[group[rows] == g], top=top, hide_patterns=hide_patterns)
            if top
            else []
        )
        items.append(
            {
                "name": name,
                "bytes": int(totals["bytes"][g]),
                "count": int(totals["count"][g]),
                "peak_bytes": curves["peak_bytes"][g],
                "peak_event": curves["peak_event"][g],
                "allocated_bytes": int(totals["allocated_bytes"][g]),
                "allocated_count": int(totals["allocated_count"][g]),
                "top_sites": sites,
            }
        )
    return items, {"event": curves["event"], "bytes": dict(zip(names, curves["bytes"]))}

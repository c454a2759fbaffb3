"""Small shared helpers: naming an event (index, time) and picking sample points.

Convention used by every analysis: an event index `i` means "right after event i";
-1 means "before the first event" (the baseline).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np

from memlens.analysis.results import Point
from memlens.snapshot.model import DeviceTrace, Snapshot

T = TypeVar("T")


def has_time(dev: DeviceTrace) -> bool:
    return dev.n_events > 0 and bool(dev.time_us[0] >= 0)


def time_of(dev: DeviceTrace, event: int) -> int | None:
    """time_us of `event`, or None (before the first event, or an untimed trace)."""
    if event < 0 or event >= dev.n_events or not has_time(dev):
        return None
    t = int(dev.time_us[event])
    return t if t >= 0 else None


def event_info(dev: DeviceTrace, event: int) -> Point:
    """The JSON description of a point in the trace: index, time, action, memory there."""
    return {
        "event": int(event),
        "time_us": time_of(dev, event),
        "action": dev.action_name(event) if 0 <= event < dev.n_events else None,
        "active_bytes": dev.active_at(event),
        "reserved_bytes": dev.reserved_at(event),
    }


def sample_events(n_events: int, points: int, must: list[int] | tuple[int, ...] = ()) -> np.ndarray:
    """At most about `points` event indices spread evenly over 0..n_events-1, always
    including the last event and every index in `must` (e.g. the peak), sorted, unique."""
    if n_events <= 0:
        return np.zeros(0, dtype=np.int64)
    points = max(2, int(points))
    if n_events <= points:
        base = np.arange(n_events, dtype=np.int64)
    else:
        base = np.linspace(0, n_events - 1, points).round().astype(np.int64)
    extra = np.asarray([m for m in must if 0 <= m < n_events], dtype=np.int64)
    return np.unique(np.concatenate([base, extra]))


def memo(owner: DeviceTrace | Snapshot, key: Hashable, make: Callable[[], T]) -> T:
    """make(), computed once per owner and key: Snapshot and DeviceTrace are plain
    dataclasses, so derived indexes are memoized on the instance (and die with it)."""
    cache: dict[Hashable, Any] = owner.__dict__.setdefault("_analysis_cache", {})
    if key not in cache:
        cache[key] = make()
    value: T = cache[key]
    return value


def _sorted_rows(dev: DeviceTrace, which: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ordered by their alloc (or free) event, the sorted events, and the prefix sums
    of their sizes in that order (cached: every window query is then two searchsorted)."""

    def make() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ev = dev.alloc_event if which == "alloc" else dev.free_event
        order = np.argsort(ev, kind="stable")
        cum = np.concatenate([np.zeros(1, np.int64), np.cumsum(dev.alloc_size[order])])
        return order, ev[order], cum

    return memo(dev, f"by_{which}", make)


def rows_allocated_in(dev: DeviceTrace, after: int, upto: int) -> np.ndarray:
    """Allocation rows whose alloc event is in (after, upto], in event order."""
    order, keys, _ = _sorted_rows(dev, "alloc")
    lo, hi = np.searchsorted(keys, [after, upto], side="right")
    return order[lo:hi]


def rows_freed_in(dev: DeviceTrace, after: int, upto: int) -> np.ndarray:
    """Allocation rows whose free event is in (after, upto], in event order."""
    order, keys, _ = _sorted_rows(dev, "free")
    lo, hi = np.searchsorted(keys, [after, upto], side="right")
    return order[lo:hi]


def window_sums(
    dev: DeviceTrace, which: str, after: np.ndarray, upto: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Bytes and counts allocated ("alloc") or freed ("free") by the events in
    (after, upto], for many windows at once. Rows made before the trace (alloc event -1)
    and never freed (free event n_events) fall outside every window of real events."""
    _, keys, cum = _sorted_rows(dev, which)
    a = np.asarray(after, dtype=np.int64)
    u = np.maximum(np.asarray(upto, dtype=np.int64), a)
    lo = np.searchsorted(keys, a, side="right")
    hi = np.searchsorted(keys, u, side="right")
    return cum[hi] - cum[lo], hi - lo


def window_max(values: np.ndarray, start: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """max(values[start:stop]) per window (stop > start required), vectorized with
    reduceat on interleaved bounds (a sentinel keeps stop == len valid)."""
    start = np.asarray(start, dtype=np.int64)
    stop = np.asarray(stop, dtype=np.int64)
    if len(start) == 0:
        return np.zeros(0, dtype=values.dtype)
    padded = np.concatenate([values, values[-1:]])
    idx = np.empty(2 * len(start), dtype=np.int64)
    idx[0::2], idx[1::2] = start, stop
    return np.maximum.reduceat(padded, idx)[0::2]


def window_argmax(
    values: np.ndarray, start: np.ndarray, stop: np.ndarray, *, short: int = 64
) -> np.ndarray:
    """Position of the first maximum of values[start:stop] per window (stop > start;
    integer values). Windows up to `short` long are done together, a 2-D gather per
    length class (up to 8, 16, 32, 64: tens of thousands of small stages in a few numpy
    calls); longer ones one argmax each."""
    # a plain view of a memory-mapped column: each slice of an np.memmap costs microseconds
    # of Python (__array_finalize__), thousands of them more than the argmax itself
    values = np.asarray(values)
    start = np.asarray(start, dtype=np.int64)
    stop = np.asarray(stop, dtype=np.int64)
    out = np.empty(len(start), dtype=np.int64)
    length = stop - start
    floor = np.iinfo(values.dtype).min
    lower = 0
    width = 8
    while lower < short:
        width = min(width, short)
        cls = np.flatnonzero((length > lower) & (length <= width))
        offsets = np.arange(width, dtype=np.int64)
        per_chunk = max(1, (1 << 21) // width)  # bounds each gather at ~16 MB
        for c in range(0, len(cls), per_chunk):
            w = cls[c : c + per_chunk]
            pos = np.minimum(start[w, None] + offsets, len(values) - 1)
            vals = np.where(offsets < length[w, None], values[pos], floor)
            out[w] = start[w] + vals.argmax(axis=1)
        lower, width = width, width * 2
    for j in np.flatnonzero(length > short).tolist():
        out[j] = start[j] + int(np.argmax(values[start[j] : stop[j]]))
    return out


@contextmanager
def paused_gc() -> Iterator[None]:
    """Build many small containers (a dict per stage) without the cyclic collector
    re-scanning them every few hundred allocations: it cost a third of the stage table's
    time at tens of thousands of stages. Nothing built inside holds a cycle."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

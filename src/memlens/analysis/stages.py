"""Stages from external_annotations (record_function START/END markers).

Pairing: annotations of this device (all of them if none carry its ordinal) are taken in
time order (ties keep file order); an END closes the innermost open START of the same
name. An END with no START is a stage that began before the trace (it starts at the first
event, "open_start"); a START never closed runs to the last event ("open_end"). Depth is
the number of stages open when it starts. Repeated names get an occurrence number
("occurrence": 0, 1, ...); "ProfilerStep#12"-style names share the base name "ProfilerStep".

Time to events (the tie rule): annotations and trace events share the clock (µs) but are
not interleaved. A stage [t_start, t_end] holds the events with t_start < time_us <= t_end:
an event stamped in the same microsecond as a START counts before the stage, one stamped
with the END's microsecond inside it. So "memory at start" is the active bytes after the
last event at or before t_start (Mosaic's usage at a START annotation), and "memory at end"
after the last event at or before t_end (Mosaic's END).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from memlens.analysis.events import (
    has_time,
    paused_gc,
    rows_allocated_in,
    rows_freed_in,
    window_argmax,
    window_max,
    window_sums,
)
from memlens.analysis.sites import net_sites
from memlens.snapshot.model import DeviceTrace

_STEP_SUFFIX = re.compile(r"#\d+$")


def base_name(name: str) -> str:
    """ "ProfilerStep#12" -> "ProfilerStep"; other names unchanged."""
    return _STEP_SUFFIX.sub("", name) if "#" in name else name


def _annotation_rows(dev: DeviceTrace) -> np.ndarray:
    """Rows of Snapshot.annotations that belong to `dev`, in file order."""
    ann = dev.snapshot.annotations
    sel = np.flatnonzero(ann.device == dev.device)
    if len(sel) == 0:  # annotations carry the *current* device, which may not be this one
        sel = np.arange(len(ann))
    return sel


def _annotations_of(dev: DeviceTrace) -> tuple[list[str], np.ndarray, np.ndarray]:
    snap = dev.snapshot
    ann = snap.annotations
    if len(ann) == 0:
        return [], np.zeros(0, np.int8), np.zeros(0, np.int64)
    sel = _annotation_rows(dev)
    sel = sel[np.argsort(ann.time_us[sel], kind="stable")]
    strings = snap.strings
    names = [strings[i] for i in ann.name[sel].tolist()]
    return names, ann.stage[sel], ann.time_us[sel]


def stage_intervals(dev: DeviceTrace) -> list[dict[str, Any]]:
    """The stages of `dev`'s annotations, in start order.

    Each: {"index", "name", "base_name", "occurrence", "depth", "parent" (index or None),
    "start_time_us", "end_time_us" (None where open), "open_start", "open_end",
    "start_event" (memory "at start" is right after it; -1 = before the first event),
    "first_event", "last_event" (events inside are first..last; last = first - 1 when the
    stage holds no event)}. Empty when the trace has no timestamps.
    """
    cols = _interval_columns(dev)
    return [dict(zip(_INTERVAL_KEYS, row)) for row in zip(*cols)] if cols else []


def _interval_columns(dev: DeviceTrace) -> list[Any] | None:
    """stage_intervals as columns (in _INTERVAL_KEYS order); None without stages."""
    names, stage, times = _annotations_of(dev)
    if not names or not has_time(dev):
        return None
    n = dev.n_events
    # pair START/END: END closes the innermost open START of the same name (parallel lists,
    # not a dict per stage: tens of thousands of stages at a million events)
    r_name: list[str] = []
    r_t0: list[int | None] = []
    r_t1: list[int | None] = []
    r_depth: list[int] = []
    r_parent: list[int] = []  # -1: none
    open_stack: list[int] = []
    for name, st, t in zip(names, stage.tolist(), times.tolist()):
        if st == 0:
            r_name.append(name)
            r_t0.append(t)
            r_t1.append(None)
            r_depth.append(len(open_stack))
            r_parent.append(open_stack[-1] if open_stack else -1)
            open_stack.append(len(r_name) - 1)
        elif st == 1:
            for k in range(len(open_stack) - 1, -1, -1):
                if r_name[open_stack[k]] == name:
                    r_t1[open_stack[k]] = t
                    del open_stack[k:]  # inner stages left open end with their parent
                    break
            else:
                # began before the trace: it encloses everything before it
                r_name.append(name)
                r_t0.append(None)
                r_t1.append(t)
                r_depth.append(0)
                r_parent.append(-1)
    m = len(r_name)
    # order by start; unmatched ENDs (started at the trace start) first, in pairing order
    t0 = np.array([-(2**62) if t is None else t for t in r_t0], np.int64)
    t1 = np.array([2**62 if t is None else t for t in r_t1], np.int64)
    order = np.lexsort((np.arange(m), t0))
    new_index = np.empty(m + 1, np.int64)
    new_index[order] = np.arange(m)
    new_index[-1] = -1  # parent -1 stays -1
    t0, t1 = t0[order], t1[order]
    times_ev = dev.monotonic_time_us
    start_ev = np.searchsorted(times_ev, t0, side="right") - 1
    last_ev = np.minimum(np.searchsorted(times_ev, t1, side="right") - 1, n - 1)
    last_ev = np.maximum(last_ev, start_ev)
    order_l = order.tolist()
    name_col = [r_name[i] for i in order_l]
    seen: dict[str, int] = {}
    occurrence = []
    for name in name_col:
        occ = seen.get(name, 0)
        seen[name] = occ + 1
        occurrence.append(occ)
    bases = {name: base_name(name) for name in seen}
    t0_col = [r_t0[i] for i in order_l]
    t1_col = [r_t1[i] for i in order_l]
    parent_col = new_index[np.asarray(r_parent, np.int64)[order]].tolist()
    return [
        list(range(m)), name_col, [bases[x] for x in name_col], occurrence,
        [r_depth[i] for i in order_l], [None if p < 0 else p for p in parent_col],
        t0_col, t1_col, [t is None for t in t0_col], [t is None for t in t1_col],
        start_ev.tolist(), (start_ev + 1).tolist(), last_ev.tolist(),
    ]  # fmt: skip


_INTERVAL_KEYS = ("index", "name", "base_name", "occurrence", "depth", "parent",
                  "start_time_us", "end_time_us", "open_start", "open_end", "start_event",
                  "first_event", "last_event")  # fmt: skip


def stage_ranges(dev: DeviceTrace) -> list[tuple[int, int, str, int]]:
    """(first_event, last_event, label, depth) per non-empty stage, for timeline bands."""
    return [
        (s["first_event"], s["last_event"], s["name"], s["depth"])
        for s in stage_intervals(dev)
        if s["last_event"] >= s["first_event"]
    ]


def stage_table(
    dev: DeviceTrace,
    *,
    name: str | None = None,
    top: int = 5,
    hide_patterns: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Per stage: memory at start/end, peak inside, allocated/freed bytes, sites that grew.

    name filters stages by substring. Returns {"device", "has_time", "annotations",
    "notes": [...], "stages": [stage_intervals row + "active_start_bytes",
    "active_end_bytes", "peak_bytes", "peak_event" (-1/start_event when nothing inside
    exceeds the start), "reserved_start_bytes", "reserved_end_bytes",
    "peak_reserved_bytes", "allocated_bytes", "allocated_count", "freed_bytes",
    "freed_count", "net_bytes", "grew": [net_sites rows]]}. "grew" is computed only when
    top > 0: net bytes per site of allocations made in the stage and alive at its end,
    minus those made before it and freed inside.
    """
    with paused_gc():
        return _stage_table(dev, name, top, hide_patterns)


def _stage_table(
    dev: DeviceTrace, name: str | None, top: int, hide_patterns: Sequence[str] | None
) -> dict[str, Any]:
    notes: list[str] = []
    n_ann = len(_annotation_rows(dev)) if len(dev.snapshot.annotations) else 0
    if n_ann == 0:
        notes.append("this snapshot has no annotations (external_annotations) for this device")
    elif not has_time(dev):
        notes.append("this trace has no timestamps (time_us): annotations cannot be placed")
    cols_in = _interval_columns(dev) or [[] for _ in _INTERVAL_KEYS]
    if name:
        keep = [i for i, x in enumerate(cols_in[1]) if name in x]
        cols_in = [[c[i] for i in keep] for c in cols_in]
    stages: list[dict[str, Any]] = []
    out = {"device": dev.device, "has_time": has_time(dev), "annotations": n_ann,
           "notes": notes, "stages": stages}  # fmt: skip
    if not cols_in[0]:
        return out
    start = np.array(cols_in[_INTERVAL_KEYS.index("start_event")], np.int64)
    last = np.array(cols_in[_INTERVAL_KEYS.index("last_event")], np.int64)
    act = np.concatenate([[dev.baseline_bytes], dev.active_after])
    res = np.concatenate([[dev.reserved_start_bytes], dev.reserved_after])
    # shifted by one: act[i + 1] is after event i, act[0] before the first
    a0, a1 = act[start + 1], act[last + 1]
    r0, r1 = res[start + 1], res[last + 1]
    pk, pk_ev = a0.copy(), start.copy()
    rpk = r0.copy()
    inside = last > start
    if inside.any():
        lo, hi = start[inside] + 2, last[inside] + 2  # act indices of first..last events
        m = window_max(act, lo, hi)
        rm = window_max(res, lo, hi)
        better = m > a0[inside]
        idx = np.flatnonzero(inside)
        up = idx[better]
        pk[up] = m[better]
        rpk[idx] = np.maximum(r0[idx], rm)
        # first event reaching the stage peak (act index p is after event p - 1)
        pk_ev[up] = window_argmax(act, start[up] + 2, last[up] + 2) - 1
    ab, ac = window_sums(dev, "alloc", start, last)
    fb, fc = window_sums(dev, "free", start, last)
    cols = {
        "active_start_bytes": a0, "active_end_bytes": a1, "peak_bytes": pk,
        "peak_event": pk_ev, "reserved_start_bytes": r0, "reserved_end_bytes": r1,
        "peak_reserved_bytes": rpk, "allocated_bytes": ab, "allocated_count": ac,
        "freed_bytes": fb, "freed_count": fc, "net_bytes": a1 - a0,
    }  # fmt: skip
    # .tolist() once per column, one dict per stage built from a zip: plain ints, and far
    # faster than indexing numpy per stage
    keys = [*_INTERVAL_KEYS, *cols, "grew"]
    values = [*cols_in, *(v.tolist() for v in cols.values())]
    if top > 0:
        values.append([_grew(dev, a, b, top, hide_patterns)
                       for a, b in zip(start.tolist(), last.tolist())])  # fmt: skip
    else:
        values.append([[] for _ in start.tolist()])
    stages.extend(dict(zip(keys, row)) for row in zip(*values))
    return out


def _grew(
    dev: DeviceTrace, start: int, last: int, top: int, hide_patterns: Sequence[str] | None
) -> list[dict[str, Any]]:
    if last <= start:
        return []
    made = rows_allocated_in(dev, start, last)
    made = made[dev.free_event[made] > last]
    freed = rows_freed_in(dev, start, last)
    freed = freed[dev.alloc_event[freed] <= start]
    return net_sites(dev, made, freed, limit=top, hide_patterns=hide_patterns)


def compare_steps(
    dev: DeviceTrace,
    *,
    table: dict[str, Any] | None = None,
    min_repeats: int = 2,
) -> dict[str, Any]:
    """Repeated stages (same base name, >= min_repeats times) compared step by step.

    Returns {"device", "groups": [{"base_name", "count", "steps": [{"name",
    "occurrence", "first_event", "last_event", "peak_bytes", "active_start_bytes",
    "active_end_bytes", "net_bytes", "allocated_bytes", "delta_peak_bytes" (vs the
    previous step; None for the first), "delta_end_bytes"}], "peak_min_bytes",
    "peak_max_bytes", "end_growth_bytes" (last end - first end)}]}. `table` reuses a
    stage_table result.
    """
    if table is None:
        table = stage_table(dev, top=0)
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in table["stages"]:
        groups.setdefault(s["base_name"], []).append(s)
    out = []
    for base, steps in groups.items():
        if len(steps) < min_repeats:
            continue
        rows = []
        prev = None
        for s in steps:
            rows.append(
                {
                    "name": s["name"],
                    "occurrence": s["occurrence"],
                    "first_event": s["first_event"],
                    "last_event": s["last_event"],
                    "peak_bytes": s["peak_bytes"],
                    "active_start_bytes": s["active_start_bytes"],
                    "active_end_bytes": s["active_end_bytes"],
                    "net_bytes": s["net_bytes"],
                    "allocated_bytes": s["allocated_bytes"],
                    "delta_peak_bytes": None
                    if prev is None
                    else s["peak_bytes"] - prev["peak_bytes"],
                    "delta_end_bytes": None
                    if prev is None
                    else s["active_end_bytes"] - prev["active_end_bytes"],
                }
            )
            prev = s
        out.append(
            {
                "base_name": base,
                "count": len(steps),
                "steps": rows,
                "peak_min_bytes": min(r["peak_bytes"] for r in rows),
                "peak_max_bytes": max(r["peak_bytes"] for r in rows),
                "end_growth_bytes": rows[-1]["active_end_bytes"] - rows[0]["active_end_bytes"],
            }
        )
    return {"device": dev.device, "groups": out}

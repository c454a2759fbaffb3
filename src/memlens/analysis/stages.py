"""Stages from external_annotations (record_function START/END markers).

Pairing (stage_pairing.py): annotations of this device (all of them if none carry its
ordinal) are taken in time order (ties keep file order); an END closes the latest open
START of the same name, as record_function ranges are left. An END with no START is a
stage that began before the trace (it starts at the first event, "open_start"); a START
never closed runs to the last event ("open_end"). Depth is the number of stages that hold
it whole; ranges that overlap without nesting are kept so ("crosses"). Repeated names get
an occurrence number
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
from typing import Any, cast

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
from memlens.analysis.inferred_steps import (
    STEP,
    inferred_from,
    inferred_stages,
    user_marks_steps,
)
from memlens.analysis.results import (
    NetSite,
    RepeatedStage,
    StageInterval,
    StageRow,
    StagesOutput,
    StageTable,
    StepComparison,
    StepRow,
)
from memlens.analysis.sites import net_sites
from memlens.analysis.stage_nesting import nest
from memlens.analysis.stage_pairing import NO_END, NO_START, pair_loop, pair_nested
from memlens.snapshot.model import DeviceTrace

_STEP_SUFFIX = re.compile(r"#\d+$")


def base_name(name: str) -> str:
    """ "ProfilerStep#12" -> "ProfilerStep"; other names unchanged."""
    return _STEP_SUFFIX.sub("", name) if "#" in name else name


def annotation_rows_for(dev: DeviceTrace) -> np.ndarray:
    """Rows of Snapshot.annotations that belong to `dev`, in file order: those stamped
    with its ordinal, or all of them when none is. Every view selects with this (stages,
    summary, the TUI), so they agree on what a device's annotations are."""
    ann = dev.snapshot.annotations
    sel = np.flatnonzero(ann.device == dev.device)
    if len(sel) == 0:  # annotations carry the *current* device, which may not be this one
        sel = np.arange(len(ann))
    return sel


def _annotations_of(dev: DeviceTrace) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """(names, name ids, stage codes, times) of `dev`'s annotations in time order."""
    snap = dev.snapshot
    ann = snap.annotations
    if len(ann) == 0:
        return [], np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros(0, np.int64)
    sel = annotation_rows_for(dev)
    sel = sel[np.argsort(ann.time_us[sel], kind="stable")]
    ids = ann.name[sel].astype(np.int64)
    strings = snap.strings
    return [strings[i] for i in ids.tolist()], ids, ann.stage[sel], ann.time_us[sel]


def stage_intervals(dev: DeviceTrace, *, inferred: bool = True) -> list[StageInterval]:
    """The stages of `dev`'s annotations, in start order, and (with `inferred`, when the
    annotations mark no steps) the steps and phases read from the trace
    (analysis.inferred_steps).

    Each: {"index", "name", "base_name", "occurrence", "depth", "parent" (index or None),
    "start_time_us", "end_time_us" (None where open), "open_start", "open_end",
    "crosses" (it overlaps a stage without either holding the other), "inferred",
    "start_event" (memory "at start" is right after it; -1 = before the first event),
    "first_event", "last_event" (events inside are first..last; last = first - 1 when the
    stage holds no event)}. Annotations are left out when the trace has no timestamps.
    """
    cols = _interval_columns(dev, inferred)
    return (
        [cast(StageInterval, dict(zip(_INTERVAL_KEYS, row))) for row in zip(*cols)] if cols else []
    )


def _interval_columns(dev: DeviceTrace, inferred: bool = True) -> list[Any] | None:
    """_annotated_columns, with the inferred steps merged in by start when `inferred` and
    the annotations mark no steps of their own."""
    cols = _annotated_columns(dev)
    names: list[str] = cols[1] if cols else []
    steps = inferred_stages(dev) if inferred and not user_marks_steps(names) else []
    if not steps:
        return cols
    rows = [list(r) for r in zip(*cols)] if cols else []
    times = dev.monotonic_time_us if has_time(dev) else None
    inferred_rows: list[list[Any]] = []
    step_row = -1
    for s in steps:
        step_row = len(inferred_rows) if s.depth == 0 else step_row
        t0 = int(times[s.first_event]) if times is not None else None
        t1 = int(times[s.last_event]) if times is not None and not s.open_end else None
        inferred_rows.append([len(inferred_rows), s.name, base_name(s.name), 0, s.depth,
                              None if s.depth == 0 else step_row, t0, t1, False, s.open_end,
                              False, True, s.first_event - 1, s.first_event, s.last_event])  # fmt: skip
    # one tree: an annotated range inside an inferred step is its child (stage_nesting)
    merged = nest(rows, inferred_rows, _COL)
    return [list(c) for c in zip(*merged)]


def _annotated_columns(dev: DeviceTrace) -> list[Any] | None:
    """stage_intervals as columns (in _INTERVAL_KEYS order); None without stages. Columns,
    not a dict per stage, until the very end: tens of thousands of stages at 1M events."""
    names, ids, stage, times = _annotations_of(dev)
    if not names or not has_time(dev):
        return None
    n = dev.n_events
    pairs = pair_nested(ids, stage, times)
    r_ann, r_t0, r_t1, r_depth, r_parent, r_cross = pairs or pair_loop(names, stage, times)
    m = len(r_ann)
    # order by start, a parent before its children (pre-order: the page and `stages` draw
    # a child under a parent already placed); unmatched ENDs (started at the trace start)
    # first, outer ones first, then in pairing order
    order = np.lexsort((np.arange(m), r_depth, r_t0))
    new_index = np.empty(m + 1, np.int64)
    new_index[order] = np.arange(m)
    new_index[-1] = -1  # parent -1 stays -1
    t0, t1 = r_t0[order], r_t1[order]
    times_ev = dev.monotonic_time_us
    start_ev = np.searchsorted(times_ev, t0, side="right") - 1
    last_ev = np.minimum(np.searchsorted(times_ev, t1, side="right") - 1, n - 1)
    last_ev = np.maximum(last_ev, start_ev)
    name_col = [names[i] for i in r_ann[order].tolist()]
    seen: dict[str, int] = {}
    occurrence = []
    for name in name_col:
        occ = seen.get(name, 0)
        seen[name] = occ + 1
        occurrence.append(occ)
    bases = {name: base_name(name) for name in seen}
    parent_col = new_index[r_parent[order]].tolist()
    open_start, open_end = (t0 == NO_START).tolist(), (t1 == NO_END).tolist()
    return [
        list(range(m)), name_col, [bases[x] for x in name_col], occurrence,
        r_depth[order].tolist(), [None if p < 0 else p for p in parent_col],
        [None if o else t for o, t in zip(open_start, t0.tolist())],
        [None if o else t for o, t in zip(open_end, t1.tolist())],
        open_start, open_end, r_cross[order].tolist(), [False] * m,
        start_ev.tolist(), (start_ev + 1).tolist(), last_ev.tolist(),
    ]  # fmt: skip


_INTERVAL_KEYS = ("index", "name", "base_name", "occurrence", "depth", "parent",
                  "start_time_us", "end_time_us", "open_start", "open_end", "crosses",
                  "inferred", "start_event",
                  "first_event", "last_event")  # fmt: skip
_COL = {k: i for i, k in enumerate(_INTERVAL_KEYS)}


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
) -> StageTable:
    """Per stage: memory at start/end, peak inside, allocated/freed bytes, sites that grew.

    name filters stages by substring. Returns {"device", "has_time", "annotations",
    "notes": [...], "stages": [stage_intervals row + "active_start_bytes",
    "active_end_bytes", "peak_bytes", "peak_event" (-1/start_event when nothing inside
    exceeds the start), "reserved_start_bytes", "reserved_end_bytes",
    "peak_reserved_bytes", "allocated_bytes", "allocated_count", "freed_bytes",
    "freed_count", "net_bytes", "grew", "shrank": [net_sites rows]]}. "grew" and
    "shrank" are computed only when top > 0: net bytes per site of allocations made in the
    stage and alive at its end, minus those made before it and freed inside; the `top`
    sites above zero, and the `top` below it.
    """
    with paused_gc():
        return _stage_table(dev, name, top, hide_patterns)


def _stage_table(
    dev: DeviceTrace, name: str | None, top: int, hide_patterns: Sequence[str] | None
) -> StageTable:
    notes: list[str] = []
    n_ann = len(annotation_rows_for(dev)) if len(dev.snapshot.annotations) else 0
    if n_ann == 0:
        notes.append("this snapshot has no annotations (external_annotations) for this device")
    elif not has_time(dev):
        notes.append("this trace has no timestamps (time_us): annotations cannot be placed")
    cols_in = _interval_columns(dev) or [[] for _ in _INTERVAL_KEYS]
    n_steps = sum(
        1 for s, b in zip(cols_in[_COL["inferred"]], cols_in[_COL["base_name"]]) if s and b == STEP
    )
    if n_steps:
        notes.append(
            f"no step annotations: {n_steps} step{'s' if n_steps > 1 else ''} inferred from "
            + inferred_from(dev)
        )
    if name:
        keep = [i for i, x in enumerate(cols_in[1]) if name in x]
        cols_in = [[c[i] for i in keep] for c in cols_in]
    stages: list[StageRow] = []
    out: StageTable = {
        "device": dev.device,
        "has_time": has_time(dev),
        "annotations": n_ann,
        "notes": notes,
        "stages": stages,
    }
    if not cols_in[0]:
        return out
    start = np.array(cols_in[_INTERVAL_KEYS.index("start_event")], np.int64)
    last = np.array(cols_in[_INTERVAL_KEYS.index("last_event")], np.int64)
    act, res = np.asarray(dev.active_after), np.asarray(dev.reserved_after)  # not np.memmap
    a0, a1 = _after(act, dev.baseline_bytes, start), _after(act, dev.baseline_bytes, last)
    r0 = _after(res, dev.reserved_start_bytes, start)
    r1 = _after(res, dev.reserved_start_bytes, last)
    pk, pk_ev = a0.copy(), start.copy()
    rpk = r0.copy()
    inside = last > start
    if inside.any():
        lo, hi = start[inside] + 1, last[inside] + 1  # first..last event inside
        m = window_max(act, lo, hi)
        rm = window_max(res, lo, hi)
        better = m > a0[inside]
        idx = np.flatnonzero(inside)
        up = idx[better]
        pk[up] = m[better]
        rpk[idx] = np.maximum(r0[idx], rm)
        # the first event reaching the stage peak
        pk_ev[up] = window_argmax(act, start[up] + 1, last[up] + 1)
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
    keys = [*_INTERVAL_KEYS, *cols, "grew", "shrank"]
    values = [*cols_in, *(v.tolist() for v in cols.values())]
    if top > 0:
        changes = [
            _changes(dev, a, b, top, hide_patterns) for a, b in zip(start.tolist(), last.tolist())
        ]
        values += [[g for g, _ in changes], [s for _, s in changes]]
    else:
        values += [[[] for _ in start.tolist()], [[] for _ in start.tolist()]]
    stages.extend(cast(StageRow, dict(zip(keys, row))) for row in zip(*values))
    return out


def _after(curve: np.ndarray, before_first: int, events: np.ndarray) -> np.ndarray:
    """curve[event] per event, `before_first` where the event is -1 (no copy of the curve:
    at a million events that alone cost ~10 ms per call)."""
    if len(curve) == 0:
        return np.full(len(events), before_first, dtype=np.int64)
    return np.where(events >= 0, curve[np.maximum(events, 0)], before_first).astype(np.int64)


def sites_that_grew(
    dev: DeviceTrace,
    stage: StageInterval,
    *,
    top: int = 5,
    hide_patterns: Sequence[str] | None = None,
) -> list[NetSite]:
    """A stage_table row's "grew" for one stage: for views that show a few stages of a
    table built with top=0 (per stage it is the one cost that grows with the stage)."""
    return site_changes(dev, stage, top=top, hide_patterns=hide_patterns)[0]


def site_changes(
    dev: DeviceTrace,
    stage: StageInterval,
    *,
    top: int = 5,
    hide_patterns: Sequence[str] | None = None,
) -> tuple[list[NetSite], list[NetSite]]:
    """A stage_table row's "grew" and "shrank" for one stage (see sites_that_grew)."""
    return _changes(dev, stage["start_event"], stage["last_event"], top, hide_patterns)


def _changes(
    dev: DeviceTrace, start: int, last: int, top: int, hide_patterns: Sequence[str] | None
) -> tuple[list[NetSite], list[NetSite]]:
    """The `top` sites whose live bytes grew most over the stage, largest first, and the
    `top` that shrank most (net < 0: freed in the stage what was made before it), most
    negative first; ties by site, as net_sites orders them."""
    if last <= start:
        return [], []
    made = rows_allocated_in(dev, start, last)
    made = made[dev.free_event[made] > last]
    freed = rows_freed_in(dev, start, last)
    freed = freed[dev.alloc_event[freed] <= start]
    rows = net_sites(dev, made, freed, limit=None, hide_patterns=hide_patterns, positive_only=False)
    grew = [r for r in rows if r["bytes"] > 0][:top]
    shrank = sorted((r for r in rows if r["bytes"] < 0), key=lambda r: r["bytes"])[:top]
    return grew, shrank


def compare_steps(
    dev: DeviceTrace,
    *,
    table: StageTable | None = None,
    min_repeats: int = 2,
) -> StepComparison:
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
    groups: dict[str, list[StageRow]] = {}
    for s in table["stages"]:
        groups.setdefault(s["base_name"], []).append(s)
    out: list[RepeatedStage] = []
    for base, steps in groups.items():
        if len(steps) < min_repeats:
            continue
        rows: list[StepRow] = []
        prev: StageRow | None = None
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


def stages_output(
    dev: DeviceTrace,
    *,
    name: str | None = None,
    top: int = 3,
    max_depth: int | None = None,
    hide_patterns: Sequence[str] | None = None,
) -> StagesOutput:
    """`memlens stages`: stage_table of the stages named `name` nested at most `max_depth`
    deep, each with the `top` sites that grew and shrank (on those stages only), and the
    repeated ones compared step by step."""
    table = stage_table(dev, name=name, top=0, hide_patterns=hide_patterns)
    if max_depth is not None:
        table["stages"] = [s for s in table["stages"] if s["depth"] <= max_depth]
    if top > 0:
        for s in table["stages"]:
            s["grew"], s["shrank"] = site_changes(dev, s, top=top, hide_patterns=hide_patterns)
    return {**table, "repeated": compare_steps(dev, table=table)["groups"]}

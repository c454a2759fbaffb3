"""Leaks and growth across repeated stages (training steps).

A repeated stage is an annotation name (or base name, "ProfilerStep#N" -> "ProfilerStep")
seen at least twice. Suspects: allocations made inside a repeated stage and still alive at
the end of the trace, except those of the last occurrence (a step's outputs may
legitimately live until the next one replaces them), grouped by site. Growth: active
bytes at the start of each occurrence, and the sites whose live bytes grew from the first
occurrence's start to the last's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.events import rows_allocated_in
from memlens.analysis.inferred_steps import is_inferred_step
from memlens.analysis.results import (
    LeakGroup,
    LeaksResult,
    NetSite,
    Occurrence,
    StageRow,
    SuspectSite,
)
from memlens.analysis.sites import frame_label, net_sites, site_of_allocations, top_sites
from memlens.analysis.stages import stage_table
from memlens.snapshot.model import DeviceTrace


def leaks(
    dev: DeviceTrace,
    *,
    stage: str | None = None,
    top: int = 10,
    hide_patterns: Sequence[str] | None = None,
) -> LeaksResult:
    """Returns {"device", "groups": [{"base_name", "count", "occurrences": [{"name",
    "occurrence", "first_event", "last_event", "start_bytes", "end_bytes",
    "left_alive_bytes" (made in it, alive at the end of the trace), "left_alive_count"}],
    "growth_bytes" (last start - first start), "growth_per_step_bytes",
    "steady_growth_bytes" (last start - second start; None under 3 occurrences),
    "suspects_bytes", "suspects_count", "suspects": [sites: "bytes", "count",
    "per_occurrence": [bytes...]], "first_only_bytes", "first_only": [sites], "grew": [net_sites rows: growth of live bytes from
    the first occurrence's start to the last one's]}], "notes": [...]}.

    Left alive: allocations made inside an occurrence and still alive at the end of the
    trace. Suspects: the sites that left memory alive in at least two occurrences (a leak
    repeats); "first_only": sites that left memory only in the first occurrence (one-time
    state such as AdamW's moments, caches, warm-up), reported apart. `stage` restricts to
    stages whose name contains it (then one occurrence is enough, and everything it left
    alive is a suspect).
    """
    table = stage_table(dev, top=0)
    notes = list(table["notes"])
    groups: dict[str, list[StageRow]] = {}
    for s in table["stages"]:
        if stage is not None and stage not in s["name"]:
            continue
        if s["inferred"] and not is_inferred_step(s):  # a step's phases: the step will do
            continue
        groups.setdefault(s["base_name"], []).append(s)
    min_count = 1 if stage is not None else 2
    by_index = {s["index"]: s for s in table["stages"]}
    out: list[LeakGroup] = []
    for base, occ in groups.items():
        if len(occ) < min_count:
            continue
        # nested repeats of the same name (recursion) would double count: keep outermost
        occ = [s for s in occ if not _inside_same(s, by_index)]
        if len(occ) < min_count:
            continue
        per_rows = _left_alive(dev, occ)
        occ_rows: list[Occurrence] = []
        for s, alive in zip(occ, per_rows):
            occ_rows.append(
                {
                    "name": s["name"],
                    "occurrence": s["occurrence"],
                    "first_event": s["first_event"],
                    "last_event": s["last_event"],
                    "start_bytes": s["active_start_bytes"],
                    "end_bytes": s["active_end_bytes"],
                    "left_alive_bytes": int(dev.alloc_size[alive].sum()),
                    "left_alive_count": int(len(alive)),
                }
            )
        all_rows = np.concatenate(per_rows) if per_rows else np.zeros(0, np.int64)
        labels = _labels(dev, all_rows, hide_patterns)
        per_site = _per_occurrence_sites(dev, per_rows, labels)
        # a leak leaves memory behind again and again; what only the first occurrence left
        # (optimizer state, caches, warm-up) is reported apart, as one-time
        repeat = 1 if len(occ) == 1 else 2
        sus_sites = {k for k, v in per_site.items() if sum(1 for b in v if b) >= repeat}
        first_only = {
            k for k, v in per_site.items() if k not in sus_sites and v[0] and not any(v[1:])
        }
        sus = all_rows[np.isin(labels, list(sus_sites))] if sus_sites else all_rows[:0]
        once = all_rows[np.isin(labels, list(first_only))] if first_only else all_rows[:0]
        sites: list[SuspectSite] = [
            {**s, "per_occurrence": per_site[s["site"]]}
            for s in top_sites(dev, sus, top=top, hide_patterns=hide_patterns)
        ]
        one_time = top_sites(dev, once, top=top, hide_patterns=hide_patterns)
        first, last = occ[0], occ[-1]
        growth = last["active_start_bytes"] - first["active_start_bytes"]
        steps = len(occ) - 1
        grew: list[NetSite] = []
        if steps:
            a, b = first["start_event"], last["start_event"]
            made = rows_allocated_in(dev, a, b)
            made = made[dev.free_event[made] > b]
            from memlens.analysis.events import rows_freed_in

            gone = rows_freed_in(dev, a, b)
            gone = gone[dev.alloc_event[gone] <= a]
            grew = net_sites(dev, made, gone, top=top, hide_patterns=hide_patterns)
        out.append(
            {
                "base_name": base,
                "count": len(occ),
                "occurrences": occ_rows,
                "growth_bytes": int(growth),
                "growth_per_step_bytes": int(growth // steps) if steps else 0,
                # from the second occurrence on: growth once one-time state exists
                "steady_growth_bytes": int(
                    occ[-1]["active_start_bytes"] - occ[1]["active_start_bytes"]
                )
                if len(occ) >= 3
                else None,
                "suspects_bytes": int(dev.alloc_size[sus].sum()) if len(sus) else 0,
                "suspects_count": int(len(sus)),
                "suspects": sites,
                "first_only_bytes": int(dev.alloc_size[once].sum()) if len(once) else 0,
                "first_only": one_time,
                "grew": grew,
            }
        )
    inferred_steps = sum(is_inferred_step(s) for s in table["stages"])
    if not out and inferred_steps == 1:
        notes.append(
            "one training step in this trace (inferred): leaks show across two or more "
            "steps; record a few more"
        )
    elif not out and not notes:
        notes.append(
            "no repeated stages: annotate each training step (record_function, "
            "torch.profiler's ProfilerStep#N or memlens.step()) to find leaks across steps"
        )
    out.sort(key=lambda g: (-g["suspects_bytes"], -g["growth_bytes"], g["base_name"]))
    return {"device": dev.device, "groups": out, "notes": notes}


def _labels(dev: DeviceTrace, rows: np.ndarray, hide_patterns: Sequence[str] | None) -> np.ndarray:
    """Site label of each row (as top_sites names them)."""
    site = site_of_allocations(dev, rows, hide_patterns)
    uniq, inv = np.unique(site, return_inverse=True)
    names = np.asarray([frame_label(dev.snapshot, int(u)) for u in uniq], dtype=object)
    return names[inv] if len(rows) else np.zeros(0, dtype=object)


def _left_alive(dev: DeviceTrace, occ: list[StageRow]) -> list[np.ndarray]:
    """Per occurrence, the rows it made that are still alive at the end of the trace (in
    event order). Occurrences of one name are disjoint windows in time order, so every
    surviving allocation finds its occurrence with one searchsorted — thousands of steps
    in a few numpy calls; overlapping windows (an unmatched END) take one call each."""
    n = dev.n_events
    start = np.array([s["start_event"] for s in occ], np.int64)
    last = np.array([s["last_event"] for s in occ], np.int64)
    if len(occ) > 1 and not (np.all(np.diff(start) >= 0) and np.all(start[1:] >= last[:-1])):
        out = []
        for a, b in zip(start.tolist(), last.tolist()):
            made = rows_allocated_in(dev, a, b)
            out.append(made[dev.free_event[made] >= n])
        return out
    alive = np.flatnonzero((dev.free_event >= n) & (dev.alloc_event >= 0))
    made_at = dev.alloc_event[alive]
    k = np.searchsorted(start, made_at, side="left") - 1  # the last window starting before
    inside = (k >= 0) & (made_at <= last[np.maximum(k, 0)])
    alive, made_at, k = alive[inside], made_at[inside], k[inside]
    order = np.lexsort((made_at, k))
    alive, k = alive[order], k[order]
    return np.split(alive, np.searchsorted(k, np.arange(1, len(occ))))


def _per_occurrence_sites(
    dev: DeviceTrace, per_rows: list[np.ndarray], labels: np.ndarray
) -> dict[str, list[int]]:
    """site label -> bytes it left alive in each occurrence (`labels`: of the rows of
    per_rows, concatenated)."""
    out: dict[str, list[int]] = {}
    occurrence = np.repeat(np.arange(len(per_rows)), [len(r) for r in per_rows])
    rows = np.concatenate(per_rows) if per_rows else np.zeros(0, np.int64)
    for lab, j, size in zip(labels.tolist(), occurrence.tolist(), dev.alloc_size[rows].tolist()):
        out.setdefault(lab, [0] * len(per_rows))[j] += int(size)
    return out


def _inside_same(s: StageRow, by_index: dict[int, StageRow]) -> bool:
    """Has `s` an enclosing stage with the same base name?"""
    p = s["parent"]
    while p is not None:
        if by_index[p]["base_name"] == s["base_name"]:
            return True
        p = by_index[p]["parent"]
    return False

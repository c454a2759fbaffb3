"""The weight-casts finding of `memlens advise` (see advise.py): low-precision copies of
fp32 weights that autocast holds across the step.

Under `torch.autocast`, an op that runs in bf16/fp16 casts its fp32 weight through
at::autocast::cached_cast, which caches the cast of a leaf tensor that requires grad (a
parameter) until the outermost autocast region exits: every weight's copy stays for the
whole forward. In a snapshot they are allocations of exactly half a parameter's bytes
(fp32 -> 2-byte dtype) made under a `cached_cast` frame. Found here:

- the parameters live at the active peak (analysis.categories, or made by module
  construction / `.to()` when freed at the script's exit) give the sizes: each
  parameter of 2s bytes allows one copy of s bytes (the cache casts a weight once per
  region), the earliest copies first;
- with C++ frames in the trace (stacks='all'), the copies are the allocations live at
  the peak made under `cached_cast`; without them (Python stacks only, or a simulated
  trace) the allocations live at the peak, made in a `forward` and not parameters, with
  those sizes, and only when they copy at least half the parameters' bytes (autocast
  casts nearly every weight; an fp32 tensor that happens to be half a parameter's size
  does not make a finding, though beside real copies it is counted too);
- the backward keeps them as well when the trace shows the graph holding casts (a cast
  of an activation, not a weight, live at the peak; or a copy freed after a backward
  event): `cache_enabled=False` would then save nothing, only parameters kept in the low
  dtype would. The cache alone keeps them when the casts are named and no activation's
  cast is live (inference), or a backward event follows them: `cache_enabled=False`
  frees each copy after its op, so all but the largest would go. Unnamed copies and no
  backward in the trace: either may hold, and the finding says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.advise_changes import weight_casts_change
from memlens.analysis.categories import CONSTRUCTION, PARAMETER, categorize
from memlens.analysis.inferred_steps import BACKWARD
from memlens.analysis.matching import rows_matching, stack_matches
from memlens.analysis.results import Finding
from memlens.analysis.sites import top_sites
from memlens.snapshot.model import DeviceTrace
from memlens.units import format_bytes as fb

CACHED_CAST = r"autocast::cached_cast"
IN_FORWARD = r":forward$"
CACHE_KNOB = "autocast_cache=false"
UNSURE = " if no backward keeps them (the trace shows none: in training it would)"


def _paired(dev: DeviceTrace, pool: np.ndarray, params: np.ndarray) -> np.ndarray:
    """The rows of `pool` that are copies of `params` at half their size: per size s, as
    many as there are parameters of 2s bytes, earliest allocated first."""
    halves = dev.alloc_size[params]
    halves = halves[halves % 2 == 0] // 2
    sizes, allowed = np.unique(halves, return_counts=True)
    pool = pool[np.isin(dev.alloc_size[pool], sizes)]
    if not len(pool):
        return pool
    order = np.lexsort((dev.alloc_event[pool], dev.alloc_size[pool]))
    pool = pool[order]
    size = dev.alloc_size[pool]
    # rank of each row among the rows of its size (0, 1, ...), in allocation order
    starts = np.flatnonzero(np.r_[True, size[1:] != size[:-1]])
    rank = np.arange(len(pool)) - np.repeat(starts, np.diff(np.r_[starts, len(pool)]))
    keep = rank < allowed[np.searchsorted(sizes, size)]
    out: np.ndarray = np.sort(pool[keep])
    return out


def weight_cast_rows(dev: DeviceTrace) -> tuple[np.ndarray, bool, bool | None]:
    """(the copies live at the peak, named by a cached_cast frame, kept for backward:
    None when the trace cannot tell)."""
    empty = np.zeros(0, dtype=np.int64)
    if not dev.n_events:
        return empty, False, False
    snap = dev.snapshot
    cat, _ = categorize(dev)
    live = dev.live_at_peak()
    # a script's whole run frees its model at exit: made by module construction / .to()
    # counts as a parameter here even when the category says temporary
    made = rows_matching(stack_matches(snap, CONSTRUCTION), dev.alloc_stack)
    is_param = (cat == PARAMETER) | made
    params = live[is_param[live]]
    if not len(params):
        return empty, False, False
    casts = rows_matching(stack_matches(snap, CACHED_CAST), dev.alloc_stack)
    named = bool(casts.any())
    if named:
        pool = live[casts[live]]
    else:
        forward = rows_matching(stack_matches(snap, IN_FORWARD), dev.alloc_stack)
        pool = live[forward[live] & ~is_param[live]]
    rows = _paired(dev, pool, params)
    # unnamed: the copies (half size) must stand for at least half the parameters' bytes
    if not named and 4 * dev.alloc_size[rows].sum() < dev.alloc_size[params].sum():
        return empty, False, False
    in_bw = np.flatnonzero(rows_matching(stack_matches(snap, BACKWARD), dev.stack))
    first_bw = int(in_bw[0]) if len(in_bw) else dev.n_events
    freed_later = (dev.free_event[rows] > first_bw) & (dev.free_event[rows] < dev.n_events)
    if freed_later.any() or (named and len(pool) > len(rows)):
        return rows, named, True
    return rows, named, None if not named and not len(in_bw) else False


def weight_cast_finding(
    dev: DeviceTrace, top: int, hide_patterns: Sequence[str] | None
) -> Finding | None:
    rows, named, kept = weight_cast_rows(dev)
    if not len(rows):
        return None
    sizes = dev.alloc_size[rows]
    held = int(sizes.sum())
    largest = int(sizes.max())
    what = (
        f"{len(rows):,} half-size copies of fp32 weights (autocast's cast cache) hold "
        f"{fb(held)} at the peak, alive until the autocast region exits"
    )
    if kept is True:
        summary = (
            f"{what}; the backward keeps them too (the graph holds casts at the peak), so "
            f"torch.autocast(..., cache_enabled=False) would not free them: parameters "
            f"kept in bf16/fp16 (or FSDP2's MixedPrecisionPolicy, sharded) would not "
            f"need the copies"
        )
        at_stake = held
    else:
        summary = (
            f"{what}; torch.autocast(..., cache_enabled=False) (memlens plan --what-if "
            f"{CACHE_KNOB}) would free each after its op, keeping one at a time (the "
            f"largest {fb(largest)}){UNSURE if kept is None else ''}; parameters kept in "
            "bf16/fp16 would not need them"
        )
        at_stake = held - largest
    how = (
        "named by their at::autocast::cached_cast frames"
        if named
        else "no C++ frames in the trace: allocations made in a forward, not parameters, "
        "of exactly half a parameter's size (another tensor of that size is counted too)"
    )
    return {
        "kind": "weight_casts",
        "summary": summary,
        "bytes": at_stake,
        "certainty": "estimate",
        "covers": f"copies live at the peak, {how}, paired with the parameters live at the "
        "peak (one per parameter twice its size: fp32 to a 2-byte dtype); "
        + (
            "kept for backward: the bytes the copies hold"
            if kept
            else "held by the cache"
            + (" (or by a backward the trace does not show)" if kept is None else " only")
            + ": their bytes less the largest copy, which one op still needs"
        ),
        "sites": top_sites(dev, rows, top=top, hide_patterns=hide_patterns),
        "change": weight_casts_change(kept),
        "knob": CACHE_KNOB,
    }

"""The Active Cached Segment Timeline (MemoryViz's second timeline): every cudaMalloc'd
segment as a band, stacked in the order the segments were made, at pixel-column resolution.

The same machinery as the allocation timeline (viewport.py): each column shows the state
after its event of maximum *reserved* memory; a segment alive there is a band; bands are
stacked and sent as runs, within the same run budget (the smallest segments past it are
summed in the aggregate band). Segment lifetimes come from analysis.allocator_state's
SegmentIntervals (segment_alloc / segment_free pairs, plus the final segments); a trace
with expandable segments (segment_map / unmap) has no such lifetimes and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.analysis.allocator_state import SegmentIntervals
from memlens.errors import MemlensError
from memlens.snapshot.actions import Action
from memlens.views.layout.budget import size_ranks, within_budget
from memlens.views.layout.stacking import column_edges, per_column, stack_bands
from memlens.views.layout.viewport import MAX_DETAIL_RUNS, DeviceLayout, View


@dataclass
class Segments:
    """Segment lifetimes in the order they were made (start event, then address)."""

    addr: np.ndarray
    size: np.ndarray
    stream: np.ndarray
    start: np.ndarray  # made after this event (-1: before the trace)
    end: np.ndarray  # freed by this event (n_events: alive at the end)


def segment_lifetimes(lay: DeviceLayout) -> Segments:
    def build() -> Segments:
        dev = lay.dev
        if np.any((dev.action == Action.SEGMENT_MAP) | (dev.action == Action.SEGMENT_UNMAP)):
            raise MemlensError(
                "the segment timeline needs segment_alloc/free events; this trace maps "
                "expandable segments (use the allocator state card)"
            )
        si = SegmentIntervals(dev)
        o = np.lexsort((si.addr, si.start))
        return Segments(si.addr[o], si.size[o], si.stream[o], si.start[o], si.end[o])

    return lay._cached("segments", build)


def segment_view(
    lay: DeviceLayout,
    bounds: np.ndarray,
    height: int,
    *,
    ymax: int | None = None,
    ymin: int = 0,
    max_runs: int = MAX_DETAIL_RUNS,
) -> tuple[View, Segments]:
    """The segment timeline for the columns `bounds` (as DeviceLayout.view): band_rows are
    indexes into the returned Segments."""
    dev = lay.dev
    segs = segment_lifetimes(lay)
    base = lay.view(bounds, height, ymax=ymax, ymin=ymin, detail=False)
    # each column at its event of maximum reserved memory
    lo, hi = base.bounds[:-1], base.bounds[1:]
    rmax = lay.reserved_max.query(lo, hi) if lay.n else np.full(len(lo), -1, np.int64)
    sample = np.where(lo >= hi, lo - 1, rmax)
    width = len(sample)
    reserved = lay.curve_at(sample, dev.reserved_after, dev.reserved_start_bytes)
    if width and base.bounds[0] == 0 and lay.n and dev.reserved_start_bytes > reserved[0]:
        sample[0], reserved[0] = -1, dev.reserved_start_bytes  # the state before the trace
    c0 = np.searchsorted(sample, segs.start, side="left")
    c1 = np.searchsorted(sample, segs.end, side="left")
    idx = np.flatnonzero(c0 < c1)
    c0, c1, sizes = c0[idx], c1[idx], segs.size[idx].astype(np.int64)
    _, slot = column_edges(c0, c1, width)
    spans = slot[c1] - slot[c0]
    ranks = size_ranks(sizes)
    drawn, small_max = within_budget(sizes, ranks, spans + 1, base.bytes_per_px, max_runs, 0)
    run_start, run_col, run_off, drawn_sum, drawn_count = stack_bands(
        c0[drawn], c1[drawn], sizes[drawn], width
    )
    cut_count, cut_bytes = per_column(c0[~drawn], c1[~drawn], sizes[~drawn], width)
    view = View(
        bounds=base.bounds,
        sample=sample,
        active=reserved,
        reserved=reserved,
        ymax=base.ymax,
        bytes_per_px=base.bytes_per_px,
        band_rows=idx[drawn].astype(np.int64),
        band_c0=c0[drawn].astype(np.int64),
        band_c1=c1[drawn].astype(np.int64),
        run_start=run_start,
        run_col=run_col,
        run_off=run_off,
        small_offset=drawn_sum,
        small_bytes=np.maximum(reserved - drawn_sum, 0),
        small_count=cut_count,
        small_max=small_max,
        cut_count=cut_count,
        cut_bytes=cut_bytes,
        small_min=1,
    )
    return view, segs

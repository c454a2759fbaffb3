"""The largest allocations as stacked bands on the timeline (MemoryViz's picture), drawn
once, server-side, from the viewer's level-of-detail layout (memlens.views.layout).

Each allocation at least one band-pixel tall is a band stacked in allocation order; the
smaller ones are the plain active area on top. Bands are rectangles, one per run of
columns where the band's offset is constant, so the SVG stays small.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from memlens.analysis.sites import frame_label, site_of_allocations
from memlens.snapshot.model import DeviceTrace
from memlens.views.layout import DeviceLayout
from memlens.views.report.timeline import PLOT_H, Scale

COLUMNS = 500  # horizontal resolution of the bands (the curves have their own, finer)
BAND_HEIGHT_PX = 2 * PLOT_H  # an allocation is a band when >= 1/BAND_HEIGHT_PX of the y range
MAX_RECTS = 3000  # with MAX_BANDS, keeps even a pathological trace's bands near 200 KB
MAX_BANDS = 600
N_COLORS = 8


@dataclass
class AllocationBands:
    svg: str
    info: list[
        list[Any]
    ]  # per band: [bytes, site index, alloc event, free event (-1: alive at end)]
    sites: list[str]  # call-site labels the bands refer to (each once)


def layout_view(dev: DeviceTrace, width: int, ymax: int) -> tuple[np.ndarray, Any]:
    """The viewer's layout of the whole trace at `width` columns: the column bounds and
    the view (bands at least one band-pixel tall)."""
    layout = DeviceLayout(dev)
    bounds = layout.event_bounds(0, dev.n_events, width)
    return bounds, layout.view(bounds, BAND_HEIGHT_PX, ymax=ymax)


def allocation_bands(dev: DeviceTrace, scale: Scale, hide_patterns: Any = None) -> AllocationBands:
    n = dev.n_events
    if n == 0:
        return AllocationBands("", [], [])
    bounds, view = layout_view(dev, min(COLUMNS, n), int(scale.y_max))
    runs = view.offset_runs()
    run_start = np.asarray(runs["run_start"], dtype=np.int64)
    run_col = np.asarray(runs["run_col"], dtype=np.int64)
    run_off = np.asarray(runs["run_off"], dtype=np.int64)
    rows = view.band_rows
    sizes = dev.alloc_size[rows].astype(np.int64)
    # too many bands or rectangles: keep the largest allocations (bands stay where the
    # layout stacked them; the ones left out show as the plain active area)
    n_runs = np.diff(run_start)
    order = np.argsort(-sizes, kind="stable")
    keep = np.zeros(len(rows), dtype=bool)
    fits = np.cumsum(n_runs[order]) <= MAX_RECTS
    fits[MAX_BANDS:] = False
    keep[order[fits]] = True
    sites = site_of_allocations(dev, rows, hide_patterns)
    snap = dev.snapshot
    site_index: dict[int, int] = {}
    parts: list[str] = []
    info: list[list[Any]] = []
    for k in np.flatnonzero(keep).tolist():
        size = int(sizes[k])
        h = max(scale.y(0) - scale.y(size), 0.3)
        c_end = int(view.band_c1[k])
        first, last = int(run_start[k]), int(run_start[k + 1])
        rects = []
        for i in range(first, last):
            c0 = int(run_col[i])
            c1 = int(run_col[i + 1]) if i + 1 < last else c_end
            x0, x1 = scale.x(int(bounds[c0])), scale.x(int(bounds[c1]))
            y = scale.y(int(run_off[i]) + size)
            rects.append(
                f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 0.3):.1f}" height="{h:.1f}"/>'
            )
        b = len(info)
        parts.append(f'<g class="alloc-band ab{b % N_COLORS}" data-band="{b}">{"".join(rects)}</g>')
        site = site_index.setdefault(int(sites[k]), len(site_index))
        row = int(rows[k])
        free = int(dev.free_event[row])
        info.append([size, site, int(dev.alloc_event[row]), free if free < n else -1])
    labels = [frame_label(snap, fid) for fid in site_index]  # dicts keep insertion order
    return AllocationBands("".join(parts), info, labels)

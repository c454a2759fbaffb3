"""Level-of-detail layout of the Active Memory Timeline, one viewport at a time.

The picture is PyTorch MemoryViz's stacked chart: every live allocation is a band, stacked
in allocation order, so when one is freed everything above it slides down. Instead of
building polygons for the whole trace (O(frees x live-above) geometry), a viewport is
sampled at pixel-column resolution:

* the visible x range is cut into `width` columns; each column covers a half-open range
  of events [bnd[c], bnd[c+1]) (event order or wall time);
* a column shows the state right after its *sample* event: the event of maximum active
  memory inside it (so the peak is never hidden), or, for a column without events, the
  last event before it;
* an allocation at least one pixel tall (size >= bytes per pixel) is always drawn as its
  own band; allocations of at least `min_px` of a pixel are drawn too, largest first,
  while the drawn bands' runs stay within MAX_DETAIL_RUNS (thin coloured stripes show
  the structure of a trace whose every tensor is under a pixel, e.g. 50 GiB of 100 MiB
  tensors). A run is a stretch of columns where a band keeps its offset, i.e. one edge of
  its polygon: it is what the page draws and hit-tests, and a band stays one run however
  many columns it covers while nothing under it changes, so a narrow time window (few
  events, so few offset changes) draws every allocation of at least `min_px` of a pixel.
  Drawn bands are stacked in allocation order; everything else is summed into one
  aggregate band on top, so the stack height of every column equals the active bytes at
  its sample exactly (nothing is dropped); per column it says how many of those were left
  out by the run budget (zooming in on time separates them) rather than for their size
  (only the memory axis's zoom does);
* the reserved line is the maximum reserved bytes over the column's events.

Cost per viewport: O(width x log n) for the range maxima (a pyramid of argmax indices)
plus O(candidates + allocations + runs) with a small constant (candidates are deduplicated
and put in size order through masks, never sorted), where candidates are allocations of at
least `min_px` of a pixel alive in the viewport and runs are bounded by MAX_DETAIL_RUNS
beyond those of the bands a pixel tall (at most width x height). Never O(events), never
O(bands x columns).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from memlens.errors import CacheError
from memlens.snapshot.model import DeviceTrace
from memlens.views.layout import persist
from memlens.views.layout.budget import within_budget
from memlens.views.layout.index import LiveIndex, RangeArgmax
from memlens.views.layout.lanes import Lanes, LaneView
from memlens.views.layout.stacking import column_edges, gather_ranges, per_column, stack_bands

T = TypeVar("T")

MAX_WIDTH = 8192
MAX_HEIGHT = 8192
# Two budgets for the sub-pixel bands (bands a pixel tall count, but are drawn even past
# them), largest first: the stacking's work, counted in each band's segments between
# consecutive candidate ends (an upper bound on its runs), and the runs sent plus one per
# band (its own fields), which bound the response and the page's drawing and hit testing
# (benchmarks-view.md).
MAX_DETAIL_WORK = 300_000
MAX_DETAIL_RUNS = 30_000


@dataclass
class View:
    """One viewport, sampled at pixel-column resolution (all byte figures exact)."""

    bounds: np.ndarray  # int64 [width+1]: column c covers events [bounds[c], bounds[c+1])
    sample: np.ndarray  # int64 [width]: event whose state the column shows (-1 = before all)
    active: np.ndarray  # int64 [width]: active bytes at the sample (= stack height)
    reserved: np.ndarray  # int64 [width]: max reserved bytes over the column
    ymax: int
    bytes_per_px: float
    band_rows: np.ndarray  # int64 [K] allocation rows drawn individually, in stacking order
    band_c0: np.ndarray  # int64 [K] first column of each band
    band_c1: np.ndarray  # int64 [K] one past its last column
    # band k's bottom: runs run_start[k]:run_start[k+1], run i from column run_col[i] (to the
    # next run of the band or c1[k]) at offset run_off[i]
    run_start: np.ndarray  # int64 [K+1]
    run_col: np.ndarray  # int64 [R]
    run_off: np.ndarray  # int64 [R]
    small_offset: np.ndarray  # int64 [width]: bottom of the aggregate band (= sum of bands)
    small_bytes: np.ndarray  # int64 [width]: height of the aggregate band
    small_count: np.ndarray  # int64 [width]: allocations it stands for
    small_max: int  # no allocation in the aggregate band is larger (an upper bound)
    # of those, the ones at least `small_min` bytes, left out by the run budget (zooming in
    # on time separates them); the others are under min_px of a pixel (y zoom does)
    cut_count: np.ndarray  # int64 [width]
    cut_bytes: np.ndarray  # int64 [width]
    small_min: int = 1  # candidates' size threshold: ceil(min_px x bytes per pixel)
    # streams drawn apart (lanes.py): the bands stacked lane by lane, each lane's aggregate
    # band; small_* and cut_* above are then their sums per column
    lanes: LaneView | None = None

    def offset_runs(self) -> dict[str, list[int]]:
        """The band runs as lists: band k's runs are run_start[k]:run_start[k+1], run i
        starting at column run_col[i] with offset run_off[i] (it lasts until the next run of
        the band or the band's end). Zoomed in, most bands are flat for many columns."""
        return {
            "run_start": self.run_start.tolist(),
            "run_col": self.run_col.tolist(),
            "run_off": self.run_off.tolist(),
        }


class DeviceLayout:
    """Per-device indexes for fast viewports (built lazily, kept for the server's life)."""

    def __init__(self, dev: DeviceTrace) -> None:
        self.dev = dev
        self.n = dev.n_events
        self._cache: dict[str, Any] = {}
        self._lock = threading.RLock()  # builders may need other indexes
        self._kept: bool | None = None  # indexes read from beside the column cache?
        self._warming = False  # warm() is building the indexes (in the background)

    # ---- lazily built indexes ----------------------------------------------------------
    def _cached(self, name: str, build: Callable[[], T]) -> T:
        # the server warms the indexes in a background thread; a request that needs one
        # meanwhile waits for it instead of building it a second time
        value: T | None = self._cache.get(name)
        if value is None:
            with self._lock:
                if self._kept is None:
                    self._restore()
                value = self._cache.get(name)
                if value is None:
                    value = self._cache[name] = build()
        return value

    @property
    def active_max(self) -> RangeArgmax:
        return self._cached("active_max", lambda: RangeArgmax(np.asarray(self.dev.active_after)))

    @property
    def reserved_max(self) -> RangeArgmax:
        return self._cached(
            "reserved_max", lambda: RangeArgmax(np.asarray(self.dev.reserved_after))
        )

    @property
    def by_size(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Rows by size, largest first (ties in row order), with -size, alloc and free event
        in that order: contiguous copies, so the size route never gathers at random."""

        def build() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            d = self.dev
            order = np.argsort(-np.asarray(d.alloc_size), kind="stable")
            return (
                order,
                -np.asarray(d.alloc_size)[order],
                np.asarray(d.alloc_event)[order],
                np.asarray(d.free_event)[order],
            )

        return self._cached("by_size", build)

    @property
    def size_rank(self) -> np.ndarray:
        """Each row's position in `by_size` (largest first, ties in row order): distinct
        small integers, so candidates are put in that order through a mask, not a sort."""

        def build() -> np.ndarray:
            order = self.by_size[0]
            kind = np.int32 if len(order) < 1 << 31 else np.int64  # half the memory traffic
            rank = np.empty(len(order), dtype=kind)
            rank[order] = np.arange(len(order), dtype=kind)
            return rank

        return self._cached("size_rank", build)

    @property
    def live_index(self) -> LiveIndex:
        return self._cached("live_index", lambda: LiveIndex(self.dev))

    @property
    def live_count(self) -> np.ndarray:
        """Number of live allocations after each event."""

        def build() -> np.ndarray:
            d = self.dev
            n = self.n
            born = np.bincount(d.alloc_event[d.alloc_event >= 0], minlength=n + 1)
            died = np.bincount(d.free_event[d.free_event < n], minlength=n + 1)
            # in place: each new n-long array is tens of ms of fresh pages at 4M events,
            # on the path of a cold first paint
            count = born[:n]
            count -= died[:n]
            np.cumsum(count, out=count)
            count += self.base_count
            return count

        return self._cached("live_count", build)

    @property
    def base_count(self) -> int:
        """Allocations alive before the first event (they come first in row order)."""
        return self._cached(
            "base_count", lambda: int(np.searchsorted(self.dev.alloc_event, -1, side="right"))
        )

    @property
    def stream_lanes(self) -> Lanes:
        """The allocations by stream, for streams drawn apart (built on first use)."""
        return self._cached("stream_lanes", lambda: Lanes(self.dev))

    def defer_checkpoints(self) -> None:
        """Leave the live-row checkpoints to warm(); meanwhile viewports do without them."""
        self._warming = True

    def restore(self) -> None:
        """Map the indexes kept beside the column cache now (cheap), if not yet."""
        with self._lock:
            if self._kept is None:
                self._restore()

    def _restore(self) -> None:
        """Take the indexes kept beside the column cache by an earlier warm(), if any and
        if they check out (a damaged or stale set is rebuilt and kept again)."""
        try:
            kept = persist.load(self.dev)
        except CacheError:
            kept = None
        self._kept = kept is not None
        self._cache.update(kept or {})

    def warm(self) -> None:
        """Build every index now (the server does this in the background after startup)
        and keep them beside the column cache for the next start, when it has an entry."""
        # the checkpoints last: the first viewport does without them (see _candidates)
        self._warming = True
        _ = self.active_max, self.reserved_max, self.live_count, self.size_rank, self.live_index
        self._warming = False
        if not self._kept:
            try:
                self._kept = persist.save(self.dev, self._cache)
            except OSError:  # a read-only or full cache: the next start builds them again
                self._kept = False

    # ---- x axis ------------------------------------------------------------------------------
    def event_bounds(self, e0: float, e1: float, width: int) -> np.ndarray:
        """Column boundaries for the event range [e0, e1) (fractional events allowed)."""
        x = e0 + (e1 - e0) * np.arange(width + 1, dtype=np.float64) / width
        return np.clip(np.ceil(x - 1e-9), 0, self.n).astype(np.int64)

    def time_bounds(self, t0: float, t1: float, width: int) -> np.ndarray:
        """Column boundaries for the wall-time range [t0, t1) in microseconds."""
        t = t0 + (t1 - t0) * np.arange(width + 1, dtype=np.float64) / width
        mono = self.dev.monotonic_time_us
        return np.searchsorted(mono, np.ceil(t - 1e-9).astype(np.int64), side="left").astype(
            np.int64
        )

    # ---- the viewport ------------------------------------------------------------------------
    def curve_at(self, events: np.ndarray, curve: np.ndarray, before: int) -> np.ndarray:
        out = np.full(len(events), before, dtype=np.int64)
        ok = events >= 0
        out[ok] = curve[events[ok]]
        return out

    def view(
        self,
        bounds: np.ndarray,
        height: int,
        *,
        ymax: int | None = None,
        ymin: int = 0,
        detail: bool = True,
        min_px: float = 1.0,
        max_runs: int = MAX_DETAIL_RUNS,
        max_work: int | None = None,
        lanes: Lanes | None = None,
    ) -> View:
        """The viewport whose columns are `bounds`, `height` pixels showing bytes
        [ymin, ymax] (ymax None: fit the visible maximum). An allocation is drawn on its own
        when it is at least one pixel, (ymax - ymin) / height bytes; or when it is at least
        `min_px` of a pixel and among the largest such that fit in `max_runs` runs (and
        `max_work` segments, MAX_DETAIL_WORK by default). With `lanes` (and detail), each
        lane is stacked apart and the memory axis fits the lanes (ymin, ymax ignored)."""
        dev = self.dev
        bounds = np.asarray(bounds, dtype=np.int64)
        width = len(bounds) - 1
        lo, hi = bounds[:-1], bounds[1:]
        empty = lo >= hi
        if self.n:
            amax = self.active_max.query(lo, hi)
            rmax = self.reserved_max.query(lo, hi)
        else:
            amax = rmax = np.full(width, -1, dtype=np.int64)
        sample = np.where(empty, lo - 1, amax)
        rsample = np.where(empty, lo - 1, rmax)
        active = self.curve_at(sample, dev.active_after, dev.baseline_bytes)
        reserved = self.curve_at(rsample, dev.reserved_after, dev.reserved_start_bytes)
        if width and bounds[0] == 0 and self.n:
            # the first column also holds the state before the first event (the baseline
            # can be the peak when a trace starts mid-run and memory only goes down)
            if dev.baseline_bytes > active[0]:
                sample[0], active[0] = -1, dev.baseline_bytes
            reserved[0] = max(int(reserved[0]), dev.reserved_start_bytes)
        fit = lanes.fit(sample, int(height)) if lanes is not None and detail else None
        if fit is not None:
            ymin, ymax = 0, fit.ymax
        if ymax is None:
            top = max(int(active.max(initial=0)), int(reserved.max(initial=0)))
            ymax = max(top, 1)
        ymin = max(int(ymin), 0)
        ymax = max(int(ymax), ymin + 1)
        height = max(int(height), 1)
        bpp = (ymax - ymin) / height
        zeros = np.zeros(width, dtype=np.int64)
        live = self.curve_at(sample, self.live_count, self.base_count) if self.n else zeros
        if not detail or width == 0:  # the curves only: every active byte in the aggregate band
            e, top, small = np.zeros(0, np.int64), int(active.max(initial=0)), active.copy()
            bands = (e, e, e, np.zeros(1, np.int64), e, e)  # no band rows, c0, c1, no runs
            cut = (zeros, zeros)  # cut_count, cut_bytes
            return View(
                bounds, sample, active, reserved, ymax, bpp, *bands, zeros, small, live, top, *cut
            )
        min_size = max(int(np.ceil(bpp * min(max(min_px, 0.0), 1.0))), 1)
        rows = self._candidates(sample, min_size)
        a = dev.alloc_event[rows].astype(np.int64)
        # sample is non-decreasing, so each allocation is live on one contiguous column run
        # from c0, the first column whose sample is at or after its alloc event; rows (so
        # alloc events) ascend, so c0 comes from `width` searches, not one per row
        first = np.searchsorted(a, sample, side="right")  # rows allocated by each sample
        c0 = np.cumsum(np.bincount(first, minlength=len(a) + 1))[: len(a)]
        # alive at its first column's sample, or at none: most rows of a wide view never are
        f = dev.free_event[rows]
        keep = c0 < width
        keep[keep] = f[keep] > sample[c0[keep]]
        rows, c0 = rows[keep], c0[keep]
        c1 = np.searchsorted(sample, f[keep].astype(np.int64), side="left")
        sizes = dev.alloc_size[rows].astype(np.int64)
        lane = np.zeros(len(rows), dtype=np.int64)
        if fit is not None:  # lane by lane, allocation order within each
            lane = fit.lanes.lane[rows]
            order = np.argsort(lane, kind="stable")
            rows, c0, c1, sizes, lane = rows[order], c0[order], c1[order], sizes[order], lane[order]

        def stack(m: np.ndarray) -> tuple[np.ndarray, ...]:
            if fit is None:
                return stack_bands(c0[m], c1[m], sizes[m], width)
            return fit.stack(c0[m], c1[m], sizes[m], lane[m], width)

        # an upper bound on each band's runs: the segments between the candidates' ends it
        # spans (drawing fewer bands only merges segments)
        _, slot = column_edges(c0, c1, width)
        spans = slot[c1] - slot[c0]
        work = max(MAX_DETAIL_WORK, max_runs) if max_work is None else max_work
        ranks = self.size_rank[rows]
        drawn, small_max = within_budget(sizes, ranks, spans, bpp, work, min_size - 1)
        stacked = stack(drawn)
        # what a band costs the response and the page: its runs, and its own fields
        cost = np.diff(stacked[0]) + 1
        if int(cost.sum()) > max_runs:
            # dropping a band only merges the runs of those above it: stack once more
            keep, small_max = within_budget(
                sizes[drawn], ranks[drawn], cost, bpp, max_runs, small_max
            )
            drawn[np.flatnonzero(drawn)[~keep]] = False
            stacked = stack(drawn)
        run_start, run_col, run_off, drawn_sum, drawn_count = stacked
        left_out = c0[~drawn], c1[~drawn], sizes[~drawn], lane[~drawn]
        cut_count, cut_bytes = per_column(*left_out[:3], width)
        lane_view = None if fit is None else fit.finish(drawn_sum, drawn_count, left_out, width)
        drawn_sum, drawn_count = (
            drawn_sum.reshape(-1, width).sum(0),
            drawn_count.reshape(-1, width).sum(0),
        )
        rows, c0, c1, sizes = rows[drawn], c0[drawn], c1[drawn], sizes[drawn]
        return View(
            bounds=bounds,
            sample=sample,
            active=active,
            reserved=reserved,
            ymax=ymax,
            bytes_per_px=bpp,
            band_rows=rows.astype(np.int64),
            band_c0=c0.astype(np.int64),
            band_c1=c1.astype(np.int64),
            run_start=run_start,
            run_col=run_col,
            run_off=run_off,
            small_offset=drawn_sum,
            small_bytes=active - drawn_sum,
            small_count=live - drawn_count,
            small_max=small_max,
            cut_count=cut_count,
            cut_bytes=cut_bytes,
            small_min=min_size,
            lanes=lane_view,
        )

    def _candidates(self, sample: np.ndarray, min_size: int) -> np.ndarray:
        """Rows of at least `min_size` bytes alive at some sample event (a superset), in row
        order.

        Two routes, whichever touches fewer rows: the big rows by size (few when only a
        handful of allocations reach the threshold), or the rows alive at each sample taken
        from the checkpoint index (bounded by columns x live allocations).
        """
        s_first, s_last = int(sample[0]), int(sample[-1])
        by_size, neg_sizes, a_by_size, f_by_size = self.by_size
        n_big = int(np.searchsorted(neg_sizes, -min_size, side="right"))
        li = self._cache.get("live_index")
        if li is None and self._warming:
            # the checkpoints take seconds to build at millions of events: while warm() is
            # at it (the first viewport of a cold start), the size route, which gives the
            # same answer (a superset either way: the caller keeps the rows alive at a
            # sample)
            return self._by_size_route(n_big, s_first, s_last)
        li = self.live_index
        uniq = sample[np.r_[True, sample[1:] != sample[:-1]]]  # sample never decreases
        pos = uniq[uniq >= 0]
        k = np.minimum(pos // li.step, max(li.n_ck - 1, 0))
        uk = np.unique(k)
        ck_len = li.offsets[uk + 1] - li.offsets[uk] if li.n_ck else np.zeros(0, np.int64)
        a = self.dev.alloc_event
        # rows allocated after each checkpoint, up to the last sample it serves
        last = pos[np.r_[np.flatnonzero(np.diff(k)), len(k) - 1]] if len(k) else pos
        r_lo = np.searchsorted(a, uk * li.step, side="right")
        r_hi = np.searchsorted(a, last, side="right")
        r_len = np.maximum(r_hi - r_lo, 0)
        n_before = self.base_count if s_first < 0 else 0
        cost_c = int(ck_len.sum()) + int(r_len.sum()) + n_before
        if n_big <= cost_c:
            return self._by_size_route(n_big, s_first, s_last)
        parts = [np.arange(n_before, dtype=np.int64)]
        if len(uk):
            parts.append(gather_ranges(li.offsets[uk], ck_len, li.rows).astype(np.int64))
            parts.append(gather_ranges(r_lo, r_len))
        rows = np.concatenate(parts)
        rows = rows[self.dev.alloc_size[rows] >= min_size]
        return self._row_order(rows)

    def _by_size_route(self, n_big: int, s_first: int, s_last: int) -> np.ndarray:
        """The `n_big` largest rows alive somewhere in [s_first, s_last], in row order."""
        by_size, _, a_by_size, f_by_size = self.by_size
        sel = (a_by_size[:n_big] <= s_last) & (f_by_size[:n_big] > s_first)
        return self._row_order(by_size[:n_big][sel])

    def _row_order(self, rows: np.ndarray) -> np.ndarray:
        """`rows` sorted and unique through a mask over all rows: O(rows + allocations) with
        a tiny constant, where a sort of a million rows costs tens of milliseconds."""
        mask = np.zeros(self.dev.n_allocations, dtype=bool)
        mask[rows] = True
        return np.flatnonzero(mask)


def time_range(dev: DeviceTrace) -> tuple[int, int] | None:
    """(first, last) time_us of a trace, None without timestamps."""
    if dev.n_events == 0 or dev.time_us[0] < 0:
        return None
    mono = dev.monotonic_time_us
    return int(mono[0]), int(mono[-1])

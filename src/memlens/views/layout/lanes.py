"""Streams drawn apart (MemoryViz's streams split): the Active Memory Timeline as one lane
per CUDA stream, each lane its stream's allocations stacked in allocation order with its
own aggregate band, the lanes one above the other on one memory scale.

A lane is as tall as its stream's most live bytes among the viewport's columns (the
column's sample event is the device's, so every lane shows the same instant), with a
LANE_GAP_PX gap above it for its label (and one more at the top, for the page's peak
label); the stacks are the viewport's own (viewport.py:
the same candidates, budgets and runs), only cut into lanes, so the budgets' bounds hold
as they are. Live bytes and counts per lane at any event come from cumulative sums over
each stream's allocations by alloc and by free event: O(streams x log allocations) per
column, built once per device (a sort of the free events per stream).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memlens.snapshot.model import DeviceTrace
from memlens.views.layout.stacking import per_column, stack_bands

MAX_LANES = 8  # more streams than this are not split (a lane would be a few pixels)
LANE_GAP_PX = 16  # above each lane: its label


@dataclass
class LaneView:
    """A viewport's lanes, lane k for stream index `keys[k]` (all byte figures exact)."""

    keys: np.ndarray  # int64 [L]: stream index of each lane (Snapshot.streams)
    base: np.ndarray  # int64 [L]: the lane's bottom on the chart's memory axis
    top: np.ndarray  # int64 [L]: its height, the stream's most live bytes at a sample
    # each lane's aggregate band per column, as View's small_* and cut_* ([L, width])
    small_offset: np.ndarray
    small_bytes: np.ndarray
    small_count: np.ndarray
    cut_count: np.ndarray
    cut_bytes: np.ndarray


class Lanes:
    """A device's allocations by stream: each row's lane, and per lane the cumulative
    bytes and counts by alloc event and by free event."""

    def __init__(self, dev: DeviceTrace) -> None:
        self.keys, lane = np.unique(np.asarray(dev.alloc_stream), return_inverse=True)
        self.lane = lane.astype(np.int64)  # per allocation row
        self._born: list[tuple[np.ndarray, np.ndarray]] = []
        self._freed: list[tuple[np.ndarray, np.ndarray]] = []
        for k in range(len(self.keys)):
            rows = np.flatnonzero(self.lane == k)  # alloc events ascend with rows
            size = dev.alloc_size[rows].astype(np.int64)
            order = np.argsort(dev.free_event[rows], kind="stable")
            self._born.append((dev.alloc_event[rows].astype(np.int64), _cumsum0(size)))
            self._freed.append(
                (dev.free_event[rows][order].astype(np.int64), _cumsum0(size[order]))
            )

    def live_at(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Live bytes and count of each lane's allocations right after each of `events`
        (-1: before the first), as [L, len(events)] arrays."""
        L = len(self.keys)
        nbytes = np.zeros((L, len(events)), dtype=np.int64)
        count = np.zeros((L, len(events)), dtype=np.int64)
        for k in range(L):
            (a, a_bytes), (f, f_bytes) = self._born[k], self._freed[k]
            i = np.searchsorted(a, events, side="right")  # allocated at or before
            j = np.searchsorted(f, events, side="right")  # freed at or before
            nbytes[k] = a_bytes[i] - f_bytes[j]
            count[k] = i - j
        return nbytes, count

    def fit(self, sample: np.ndarray, height: int) -> LaneFit:
        """The lanes' places for a viewport whose columns show `sample`, `height` pixels
        tall: each as tall as its most live bytes there, a LANE_GAP_PX gap above each and
        one more at the top."""
        nbytes, count = self.live_at(sample)
        top = nbytes.max(axis=1, initial=0)
        total = max(int(top.sum()), 1)
        gaps = len(top) + 1
        usable = max(height - LANE_GAP_PX * gaps, height // 2, 1)
        gap = int(np.ceil(LANE_GAP_PX * total / usable))
        base = np.cumsum(top + gap) - top - gap
        return LaneFit(self, nbytes, count, top, base.astype(np.int64), total + gap * gaps)


def _cumsum0(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x) + 1, dtype=np.int64)
    np.cumsum(x, out=out[1:])
    return out


@dataclass
class LaneFit:
    """The lanes of one viewport: their live bytes and counts per column ([L, width]),
    heights, bottoms and the chart's top (ymax)."""

    lanes: Lanes
    nbytes: np.ndarray
    count: np.ndarray
    top: np.ndarray
    base: np.ndarray
    ymax: int

    def stack(
        self, c0: np.ndarray, c1: np.ndarray, sizes: np.ndarray, lane: np.ndarray, width: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """stack_bands per lane, the bands given lane by lane (`lane` ascending, allocation
        order within): the runs with each lane's base added, and the drawn bytes and count
        per lane and column ([L, width])."""
        L = len(self.top)
        ends = np.searchsorted(lane, np.arange(L + 1), side="left")
        run_start, run_col, run_off = [np.zeros(1, np.int64)], [], []
        drawn_sum = np.zeros((L, width), dtype=np.int64)
        drawn_count = np.zeros((L, width), dtype=np.int64)
        n_runs = 0
        for k in range(L):
            s = slice(ends[k], ends[k + 1])
            rs, rc, ro, drawn_sum[k], drawn_count[k] = stack_bands(c0[s], c1[s], sizes[s], width)
            run_start.append(rs[1:] + n_runs)
            run_col.append(rc)
            run_off.append(ro + self.base[k])
            n_runs += len(rc)
        return (
            np.concatenate(run_start),
            np.concatenate([np.zeros(0, np.int64), *run_col]),
            np.concatenate([np.zeros(0, np.int64), *run_off]),
            drawn_sum,
            drawn_count,
        )

    def finish(
        self,
        drawn_sum: np.ndarray,
        drawn_count: np.ndarray,
        cut: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        width: int,
    ) -> LaneView:
        """Each lane's aggregate band: its live bytes minus its drawn bands, exactly; `cut`
        (c0, c1, sizes, lane) the candidates the budgets left out."""
        c0, c1, sizes, lane = cut
        L = len(self.top)
        cut_count = np.zeros((L, width), dtype=np.int64)
        cut_bytes = np.zeros((L, width), dtype=np.int64)
        for k in range(L):
            m = lane == k
            cut_count[k], cut_bytes[k] = per_column(c0[m], c1[m], sizes[m], width)
        return LaneView(
            keys=self.lanes.keys.astype(np.int64),
            base=self.base,
            top=self.top,
            small_offset=self.base[:, None] + drawn_sum,
            small_bytes=self.nbytes - drawn_sum,
            small_count=self.count - drawn_count,
            cut_count=cut_count,
            cut_bytes=cut_bytes,
        )

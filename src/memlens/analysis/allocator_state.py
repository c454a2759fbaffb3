"""Allocator state (segments and blocks) at any event, reconstructed backwards from the
exact final state, as MemoryViz's Allocator State History (reference §2.4):

    start from the final segments and their active / pending blocks, then undo every
    event after `event`, newest first:
      alloc -> remove the block; free_completed -> re-add it, pending; free_requested ->
      clear pending; segment_alloc -> remove the segment; segment_free -> re-add it;
      segment_map -> carve the range out of its segment; segment_unmap -> re-add the
      range, merging with address-adjacent ranges on the same stream.

Blocks need no walk: undoing alloc / free_requested / free_completed backwards gives
exactly the allocation rows alive after `event` (pending = free requested, not completed),
which the replay already knows. Only segments are walked, over segment events only.

Free (inactive) space in a segment is whatever no block covers. The trace knows only
requested sizes, so blocks are taken at their requested size rounded up to 512 bytes
(the caching allocator's minimum granularity) when measuring the gaps between them;
roundup_power2_divisions and max_split_size rounding are not modelled. Reserved minus
active over time comes straight from the curves; the largest free block needs the state.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, TypedDict, cast

import numpy as np

from memlens.analysis.events import event_info, sample_events
from memlens.analysis.results import (
    AllocatorState,
    Block,
    FragmentationResult,
    Segment,
    StateSummary,
)
from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace, Snapshot

ROUND = 512
_SEG_ACTIONS = (Action.SEGMENT_ALLOC, Action.SEGMENT_FREE, Action.SEGMENT_MAP, Action.SEGMENT_UNMAP)


class SegmentWalker:
    """The device's segments, walked backwards from the final state one event at a time.

    Segments are [address, size, stream index, expandable] kept sorted by address.
    """

    def __init__(self, dev: DeviceTrace) -> None:
        self.dev = dev
        seg = dev.snapshot.segments
        rows = seg.of_device(dev.device)
        order = rows[np.argsort(seg.address[rows], kind="stable")]
        self.segs: list[list[Any]] = [
            [
                int(seg.address[r]),
                int(seg.total_size[r]),
                int(seg.stream[r]),
                bool(seg.is_expandable[r]),
                [int(seg.pool_id0[r]), int(seg.pool_id1[r])],
            ]
            for r in order
        ]
        self.addrs = [s[0] for s in self.segs]
        self.events = np.flatnonzero(np.isin(dev.action, np.asarray(_SEG_ACTIONS, dtype=np.uint8)))
        self.pos = len(self.events)  # events[pos:] have been undone
        self.problems = 0

    def rewind_to(self, event: int) -> None:
        """Undo every segment event with index > event (only backwards from here)."""
        ev, d = self.events, self.dev
        while self.pos > 0 and ev[self.pos - 1] > event:
            self.pos -= 1
            i = int(ev[self.pos])
            a, size, st = int(d.addr[i]), int(d.size[i]), int(d.stream[i])
            act = int(d.action[i])
            if act == Action.SEGMENT_ALLOC:
                self._remove_at(a)
            elif act == Action.SEGMENT_FREE:
                self._insert([a, size, st, False, event_pool(d, i)])
            elif act == Action.SEGMENT_MAP:
                self._carve(a, size)
            elif act == Action.SEGMENT_UNMAP:
                self._insert_merge(a, size, st, event_pool(d, i))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(address, size, stream index, expandable) of the current segments, by address."""
        segs = self.segs
        return (
            np.asarray([x[0] for x in segs], dtype=np.int64),
            np.asarray([x[1] for x in segs], dtype=np.int64),
            np.asarray([x[2] for x in segs], dtype=np.int64),
            np.asarray([x[3] for x in segs], dtype=bool),
        )

    def pools(self) -> list[list[int] | None]:
        """The pool of each segment of arrays() (None: unknown)."""
        return [x[4] for x in self.segs]

    def _remove_at(self, a: int) -> None:
        k = bisect.bisect_left(self.addrs, a)
        if k < len(self.addrs) and self.addrs[k] == a:
            del self.addrs[k], self.segs[k]
        else:
            self.problems += 1

    def _insert(self, s: list[Any]) -> None:
        k = bisect.bisect_left(self.addrs, s[0])
        self.addrs.insert(k, s[0])
        self.segs.insert(k, s)

    def _carve(self, a: int, size: int) -> None:
        k = bisect.bisect_right(self.addrs, a) - 1
        if k < 0 or a + size > self.segs[k][0] + self.segs[k][1]:
            self.problems += 1
            return
        s = self.segs[k]
        start, end = s[0], s[0] + s[1]
        del self.addrs[k], self.segs[k]
        if a > start:
            self._insert([start, a - start, s[2], s[3], s[4]])
        if a + size < end:
            self._insert([a + size, end - (a + size), s[2], s[3], s[4]])

    def _insert_merge(self, a: int, size: int, stream: int, pool: list[int] | None) -> None:
        k = bisect.bisect_left(self.addrs, a)
        start, end = a, a + size
        # merge with the address-adjacent ranges on the same stream (MemoryViz does too)
        if k > 0:
            p = self.segs[k - 1]
            if p[0] + p[1] == start and p[2] == stream and p[3]:
                start, pool = p[0], pool or p[4]
                del self.addrs[k - 1], self.segs[k - 1]
                k -= 1
        if k < len(self.segs):
            q = self.segs[k]
            if q[0] == end and q[2] == stream and q[3]:
                end, pool = q[0] + q[1], pool or q[4]
                del self.addrs[k], self.segs[k]
        self._insert([start, end - start, stream, True, pool])


class SegmentIntervals:
    """Segments as lifetimes, for traces without segment_map/unmap (no expandable
    segments): each segment_free closes the segment_alloc before it at that address (or a
    segment older than the trace), each final segment opens at the last segment_alloc at
    its address (or before the trace). The segments after any event are then one mask,
    with the same interface as SegmentWalker (`rewind_to`, `segs`, `problems`)."""

    def __init__(self, dev: DeviceTrace) -> None:
        n = dev.n_events
        seg = dev.snapshot.segments
        rows = seg.of_device(dev.device)
        is_a = dev.action == Action.SEGMENT_ALLOC
        idx = np.flatnonzero(is_a | (dev.action == Action.SEGMENT_FREE))
        addr = dev.addr[idx]
        order = np.lexsort((idx, addr))
        sidx, saddr, salloc = idx[order], addr[order], is_a[idx[order]]
        same_prev = np.zeros(len(sidx), dtype=bool)
        same_prev[1:] = saddr[1:] == saddr[:-1]
        prev_alloc = np.zeros(len(sidx), dtype=bool)
        prev_alloc[1:] = salloc[:-1]
        frees = np.flatnonzero(~salloc)
        f_start = np.where(same_prev[frees] & prev_alloc[frees], np.roll(sidx, 1)[frees], -1)
        # the last event at each address tells whether the final segment there was made in
        # the trace (an alloc) or is older than it
        last_of_addr = np.ones(len(sidx), dtype=bool)
        last_of_addr[:-1] = saddr[:-1] != saddr[1:]
        lasts = np.flatnonzero(last_of_addr)
        fin_addr = seg.address[rows]
        k = np.searchsorted(saddr[lasts], fin_addr)
        k_ok = k < len(lasts)
        hit = np.zeros(len(rows), dtype=bool)
        hit[k_ok] = saddr[lasts[k[k_ok]]] == fin_addr[k_ok]
        last_pos = (
            np.where(hit, lasts[np.minimum(k, max(len(lasts) - 1, 0))], -1)
            if len(lasts)
            else np.full(len(rows), -1)
        )
        fin_start = np.full(len(rows), -1, dtype=np.int64)
        made = hit & salloc[np.maximum(last_pos, 0)] if len(sidx) else hit
        fin_start[made] = sidx[last_pos[made]]
        self.problems = int(np.count_nonzero(hit & ~made))  # freed, yet in the final state
        self.addr = np.concatenate([saddr[frees], fin_addr]).astype(np.int64)
        self.size = np.concatenate([dev.size[sidx[frees]], seg.total_size[rows]]).astype(np.int64)
        self.stream = np.concatenate([dev.stream[sidx[frees]], seg.stream[rows]]).astype(np.int64)
        self.expandable = np.concatenate([np.zeros(len(frees), bool), seg.is_expandable[rows]])
        self.start = np.concatenate([f_start, fin_start]).astype(np.int64)
        self.end = np.concatenate([sidx[frees], np.full(len(rows), n)]).astype(np.int64)
        # pools: recorded on the segment_alloc, else on the segment_free, else (a final
        # segment) its segment_pool_id; a segment freed in a trace without pool_id: unknown
        pool, known = recorded_pools(dev, self.start)
        end_pool, end_known = recorded_pools(dev, self.end)
        pool = np.where((~known & end_known)[:, None], end_pool, pool)
        known |= end_known
        fin = ~known & (np.arange(len(known)) >= len(frees))
        final_pairs = np.column_stack([seg.pool_id0[rows], seg.pool_id1[rows]])
        pool[fin] = final_pairs[np.flatnonzero(fin) - len(frees)]
        self.pool, self.pool_known = pool, known | fin
        o = np.argsort(self.addr, kind="stable")
        for name in ("addr", "size", "stream", "expandable", "start", "end", "pool", "pool_known"):
            setattr(self, name, getattr(self, name)[o])
        self._m = self.end > n - 1  # the final state until rewound

    def rewind_to(self, event: int) -> None:
        self._m = (self.start <= event) & (self.end > event)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        m = self._m
        return self.addr[m], self.size[m], self.stream[m], self.expandable[m]

    def pools(self) -> list[list[int] | None]:
        """The pool of each segment of arrays() (None: unknown)."""
        m = self._m
        return [p if k else None for p, k in zip(self.pool[m].tolist(), self.pool_known[m])]


def segment_tracker(dev: DeviceTrace) -> SegmentWalker | SegmentIntervals:
    """The vectorized tracker when the trace has no map/unmap, else the backward walk."""
    if np.any((dev.action == Action.SEGMENT_MAP) | (dev.action == Action.SEGMENT_UNMAP)):
        return SegmentWalker(dev)
    return SegmentIntervals(dev)


class _Layout(TypedDict):
    rows: np.ndarray  # live rows, by address
    seg_of_block: np.ndarray  # segment index per row (-1: outside every segment)
    seg_free: np.ndarray  # per segment
    seg_largest: np.ndarray
    reserved: int
    outside: int


def rounded(size: np.ndarray) -> np.ndarray:
    """Block sizes as the allocator rounds them: up to a multiple of ROUND, at least ROUND."""
    out: np.ndarray = np.maximum(ROUND, -(-size // ROUND) * ROUND)
    return out


def rounding_waste(segments: Sequence[Segment]) -> int:
    """Bytes the live blocks of a state_at's segments lose to rounding (part of its
    free_bytes): the allocator's smallest block is ROUND bytes."""
    sizes = np.fromiter((b["size"] for s in segments for b in s["blocks"]), np.int64)
    return int((rounded(sizes) - sizes).sum())


def recorded_pools(dev: DeviceTrace, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pools the trace entries at `events` name (their pool_id): (pairs, an (n, 2)
    int64 array, and known, a bool array); an index outside the trace, or an entry
    without pool_id (PyTorch before entries carried it), is not known."""
    events = np.asarray(events, dtype=np.int64)
    inside = (events >= 0) & (events < dev.n_events)
    k = np.full(len(events), -1, dtype=np.int64)
    k[inside] = dev.pool[events[inside]]
    known = k >= 0
    pairs = np.zeros((len(events), 2), dtype=np.int64)
    if known.any():
        pairs[known] = np.asarray(dev.snapshot.pools, dtype=np.int64)[k[known]]
    return pairs, known


def event_pool(dev: DeviceTrace, event: int) -> list[int] | None:
    """The pool the entry at `event` names (None: it names none)."""
    pairs, known = recorded_pools(dev, np.asarray([event]))
    return [int(pairs[0, 0]), int(pairs[0, 1])] if known[0] else None


def pool_at(snap: Snapshot, device: int, addr: int, event: int | None = None) -> list[int] | None:
    """Memory pool (id pair; (0, 0) is the default pool, anything else a private pool such
    as a CUDA graph's or a MemPool) of the segment holding `addr` right after `event`
    (default: the last event, the final state). Known from the segment's events' pool_id
    when the trace records it, else from the final segments' segment_pool_id; None when
    neither says (a segment freed before the end in an older trace) or no segment holds
    `addr` then."""
    dev = snap.device(device)
    tracker = segment_tracker(dev)
    tracker.rewind_to(dev.n_events - 1 if event is None else dev.check_event(event))
    start, size, _, _ = tracker.arrays()
    k = int(np.searchsorted(start, addr, side="right")) - 1
    if k < 0 or addr >= int(start[k]) + int(size[k]):
        return None
    return tracker.pools()[k]


def allocation_pool(dev: DeviceTrace, row: int) -> list[int] | None:
    """The pool of allocation `row`: named by its alloc (or free) entry when the trace
    records pool_id, else that of the segment holding it while it lived (pool_at)."""
    events = [
        int(dev.alloc_event[row]),
        int(dev.free_requested_event[row]),
        int(dev.free_event[row]),
    ]
    pairs, known = recorded_pools(dev, np.asarray(events))
    if known.any():
        i = int(np.argmax(known))
        return [int(pairs[i, 0]), int(pairs[i, 1])]
    # alive right after its alloc event (-1, before the trace, for one made before it)
    return pool_at(dev.snapshot, dev.device, int(dev.alloc_addr[row]), events[0])


def _layout(dev: DeviceTrace, sstart: np.ndarray, ssize: np.ndarray, event: int) -> _Layout:
    """Blocks (rows live after `event`) placed in segments; gaps and per-segment figures."""
    rows = dev.live_at(event)
    rows = rows[np.argsort(dev.alloc_addr[rows], kind="stable")]
    baddr = dev.alloc_addr[rows].astype(np.int64)  # user-space addresses fit in int63
    bsize = dev.alloc_size[rows]
    rsize = rounded(bsize)
    nseg = len(sstart)
    send = sstart + ssize
    k = np.searchsorted(sstart, baddr, side="right") - 1
    inside = (k >= 0) & (baddr < send[np.maximum(k, 0)]) if nseg else np.zeros(len(rows), bool)
    k = np.where(inside, k, -1)
    # gaps: before each block (from the previous block's rounded end or the segment start)
    prev_end = np.where(
        np.concatenate([[False], k[1:] == k[:-1]]) if len(k) else np.zeros(0, bool),
        np.concatenate([[0], baddr[:-1] + rsize[:-1]]) if len(k) else np.zeros(0, np.int64),
        sstart[np.maximum(k, 0)] if nseg else np.zeros(len(k), np.int64),
    )
    gap_before = np.maximum(baddr - prev_end, 0)
    # tail gap of each segment: from its last block's rounded end (or its start) to its end
    last_end = sstart.copy()
    if inside.any():
        ki, ends = k[inside], (baddr + rsize)[inside]
        np.maximum.at(last_end, ki, ends)
    tail = np.maximum(send - last_end, 0)
    seg_free = tail.copy()
    seg_largest = tail.copy()
    if inside.any():
        np.add.at(seg_free, k[inside], gap_before[inside])
        np.maximum.at(seg_largest, k[inside], gap_before[inside])
    return {
        "rows": rows,
        "seg_of_block": k,
        "seg_free": seg_free,
        "seg_largest": seg_largest,
        "reserved": int(ssize.sum()),
        "outside": int(np.count_nonzero(~inside)),
    }


def _summary(dev: DeviceTrace, n_segments: int, lay: _Layout, event: int) -> StateSummary:
    free = int(lay["seg_free"].sum())
    largest = int(lay["seg_largest"].max()) if len(lay["seg_largest"]) else 0
    rows = lay["rows"]
    return {
        "device": dev.device,
        **event_info(dev, event),
        "segments_bytes": lay["reserved"],
        "allocated_bytes": int(dev.alloc_size[rows].sum()),
        "n_segments": n_segments,
        "n_blocks": int(len(rows)),
        "blocks_outside_segments": lay["outside"],
        "free_bytes": free,
        "largest_free_bytes": largest,
        "fragmentation": 0.0 if free == 0 else round(1.0 - largest / free, 6),
    }


def state_at(dev: DeviceTrace, event: int, *, blocks: bool = True) -> AllocatorState:
    """Segments and blocks right after `event` (-1: before the first event).

    Returns {"device", "event", "time_us", "action", "active_bytes", "reserved_bytes"
    (from the curve), "segments_bytes" (sum of the reconstructed segments: equals
    reserved_bytes when the trace is consistent), "allocated_bytes" (requested sizes of
    live blocks), "n_segments", "n_blocks", "blocks_outside_segments", "free_bytes",
    "largest_free_bytes", "fragmentation" (1 - largest free / free; 0 when nothing is
    free), "segments": [{"address" (hex), "size", "stream", "is_expandable", "pool" (id
    pair, or None when unknown: see pool_at), "free_bytes", "largest_free_bytes", "blocks": [{"address" (hex), "version", "size"
    (requested), "state": "active_allocated"|"active_pending_free", "row"}]}] (only when
    blocks=True)}.
    """
    event = dev.check_event(event)
    w = segment_tracker(dev)
    w.rewind_to(event)
    sa, sz, sst, sex = w.arrays()
    lay = _layout(dev, sa, sz, event)
    # segments and inconsistencies are added below when they apply
    out = cast(AllocatorState, _summary(dev, len(sa), lay, event))
    if blocks:
        streams = dev.snapshot.streams
        rows, k = lay["rows"], lay["seg_of_block"]
        pending = (dev.free_requested_event[rows] >= 0) & (dev.free_requested_event[rows] <= event)
        pools = w.pools()
        per_seg: list[list[Block]] = [[] for _ in range(len(sa))]
        for j, r in enumerate(rows.tolist()):
            if k[j] >= 0:
                per_seg[k[j]].append(
                    {
                        "address": f"{int(dev.alloc_addr[r]):#x}",
                        "version": int(dev.alloc_version[r]),
                        "size": int(dev.alloc_size[r]),
                        "state": "active_pending_free" if pending[j] else "active_allocated",
                        "row": r,
                    }
                )
        out["segments"] = [
            {
                "address": f"{s[0]:#x}",
                "size": s[1],
                "stream": int(streams[s[2]]) if 0 <= s[2] < len(streams) else s[2],
                "is_expandable": s[3],
                "pool": pools[j],
                "free_bytes": int(lay["seg_free"][j]),
                "largest_free_bytes": int(lay["seg_largest"][j]),
                "blocks": per_seg[j],
            }
            for j, s in enumerate(zip(sa.tolist(), sz.tolist(), sst.tolist(), sex.tolist()))
        ]
    if w.problems:
        out["inconsistencies"] = w.problems
    return out


def fragmentation(dev: DeviceTrace, *, points: int = 200) -> FragmentationResult:
    """Reserved minus active over time (exact maximum, sampled curve) and the largest free
    block at the sampled events (one backward walk over segment events).

    Returns {"device", "curve": {"event", "active_bytes", "reserved_bytes", "gap_bytes",
    "free_bytes", "largest_free_bytes", "n_segments"} (lists over sampled events),
    "max_gap_bytes", "max_gap_event", "at_peak": state_at(peak, blocks=False),
    "end": state_at(last event, blocks=False)}.
    """
    n = dev.n_events
    gap = dev.reserved_after - dev.active_after if n else np.zeros(0, np.int64)
    gi = int(np.argmax(gap)) if n else -1
    ev = sample_events(n, points, must=(gi, dev.peak_event_index))
    w = segment_tracker(dev)
    rows_out: dict[int, tuple[int, int, int]] = {}
    peak_state: StateSummary | None = None
    end_state: StateSummary | None = None
    for e in ev[::-1].tolist():
        w.rewind_to(e)
        sa, sz, _, _ = w.arrays()
        lay = _layout(dev, sa, sz, e)
        summ = _summary(dev, len(sa), lay, e)
        rows_out[e] = (summ["free_bytes"], summ["largest_free_bytes"], summ["n_segments"])
        if e == n - 1:
            end_state = summ
        if e == dev.peak_event_index:
            peak_state = summ
    evl = ev.tolist()
    return {
        "device": dev.device,
        "curve": {
            "event": evl,
            "active_bytes": dev.active_after[ev].tolist() if n else [],
            "reserved_bytes": dev.reserved_after[ev].tolist() if n else [],
            "gap_bytes": gap[ev].tolist() if n else [],
            "free_bytes": [rows_out[e][0] for e in evl],
            "largest_free_bytes": [rows_out[e][1] for e in evl],
            "n_segments": [rows_out[e][2] for e in evl],
        },
        "max_gap_bytes": int(gap[gi]) if n else 0,
        "max_gap_event": gi,
        "at_peak": peak_state
        if peak_state is not None
        else state_at(dev, dev.peak_event_index, blocks=False),
        "end": end_state,
        "inconsistencies": w.problems,
    }


def fragmentation_output(
    dev: DeviceTrace, *, event: int | None = None, blocks: bool = True, points: int = 200
) -> FragmentationResult | AllocatorState:
    """`memlens fragmentation`: the gap over time, or the allocator state after `event`."""
    return (
        fragmentation(dev, points=points) if event is None else state_at(dev, event, blocks=blocks)
    )

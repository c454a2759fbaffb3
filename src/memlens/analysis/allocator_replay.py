"""Replay a snapshot's own alloc/free sequence through the allocator model (`memlens advise`).

The trace records what the program asked for (alloc of N bytes, free of that allocation,
and a run of segment_free where it called torch.cuda.empty_cache()); the allocator's
answers (which segments it reserved) depend on its settings. Replaying the requests through
`CachingAllocator` with the recorded settings must give back the recorded reserved curve
(`mismatches` counts the events where it did not); with other settings
(expandable_segments, max_split_size_mb, roundup_power2_divisions) it gives the reserved
memory the same sequence would have needed under them, exact for the model.

A trace starts in the middle of a run: segments and live blocks older than it are seeded
as they were at its first event (segments walked back from the final state, blocks from the
allocations the trace frees or never frees), so the replay covers the trace window only.
A what-if keeps those older segments as recorded: the requests that built them are not in
the trace. Blocks older than the trace take their requested size rounded as the allocator
rounds it; in the large pool a following gap of at most 1 MiB is the block's unsplit tail
(a large-pool free block is always larger than 1 MiB), and in a longer gap the first
allocation the trace makes there while the block lives marks where the free block began.
One still allocated at the end has its exact size in the final segments; under
max_split_size_mb an oversize block (never split) reaches the next block.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from memlens.analysis.allocator_model import (
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    AllocatorSettings,
    Block,
    CachingAllocator,
    Segment,
    SimulatedOOM,
    round_size,
)
from memlens.analysis.allocator_state import segment_tracker
from memlens.errors import MemlensError
from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace

# (address, size, stream index, expandable, small pool) of a segment older than the trace
SeedSegment = tuple[int, int, int, bool, bool]

# Fresh (model-made) segments are placed far above any real address, so they never collide
# with the seeded ones; ties in best fit are broken by address, as in PyTorch.
FRESH_BASE = 1 << 56


@dataclass
class Replay:
    """The reserved memory of one replay of a trace's requests."""

    settings: str  # PYTORCH_CUDA_ALLOC_CONF-style description of the settings used
    peak_reserved: int  # bytes, the trace window's start included
    reserved_after: np.ndarray  # int64 per event: the model's reserved bytes after it
    compared: int  # events compared with the recorded curve (alloc and free events)
    mismatches: int  # of those, how many differ from the recorded reserved bytes
    first_mismatch: int  # event index, -1 when none
    moved: int  # allocations of the trace the model placed at another address than recorded
    failed: int  # with a capacity: requests (the trace's OOMs included) that did not fit


def recorded_settings(allocator_settings: dict[str, Any]) -> AllocatorSettings:
    """The snapshot's `allocator_settings` as the model's settings (defaults when absent:
    snapshots older than PyTorch 2.4 do not record them)."""
    s = AllocatorSettings()
    split = allocator_settings.get("max_split_size", -1)
    if isinstance(split, int) and 0 < split < (1 << 62):  # SIZE_MAX: unlimited
        s.max_split_size = split
    s.expandable_segments = bool(allocator_settings.get("expandable_segments", False))
    div = allocator_settings.get("roundup_power2_divisions")
    if isinstance(div, dict) and len(div) == 16:
        s.roundup_power2_divisions = [int(div[k]) for k in sorted(div, key=int)]
    return s


def what_if(recorded: AllocatorSettings, conf: str) -> AllocatorSettings:
    """`recorded` with the keys `conf` (PYTORCH_CUDA_ALLOC_CONF syntax) names changed."""
    given = AllocatorSettings.parse(conf)
    out = replace(recorded)
    names = {"max_split_size_mb": "max_split_size", "expandable_segments": "expandable_segments",
             "roundup_power2_divisions": "roundup_power2_divisions"}  # fmt: skip
    for key in re.findall(r"([a-z_0-9]+)\s*:", re.sub(r"\[[^\]]*\]", "", conf)):
        if key not in names:
            raise MemlensError(
                f"allocator setting {key!r} is not modelled (one of {', '.join(names)})"
            )
        setattr(out, names[key], getattr(given, names[key]))
    return out


class _Replayer(CachingAllocator):
    """The model, seeded with a trace's starting state, placing each new segment where the
    recorded one was when the recording reserved one of the same size at that moment."""

    def __init__(self, settings: AllocatorSettings, capacity: int | None) -> None:
        super().__init__(capacity, settings, clock=lambda: 0, base_address=FRESH_BASE)
        self.hint: tuple[int, int] | None = None  # (address, size) of the recorded segment

    def _take_address(self, size: int) -> int:
        if self.hint is not None and self.hint[1] == size and self.hint[0] not in self.segments:
            address = self.hint[0]
            self.hint = None
            return address
        return super()._take_address(size)

    def release_segment(self, address: int) -> None:
        """Return the segment at `address` to the device if none of it is in use."""
        seg = self.segments.get(address)
        head = seg.head if seg is not None and not seg.expandable else None
        if head is not None and not head.allocated and head.next is None:
            self._release_if_whole_segment(head, [])

    def new_range_at(self, address: int) -> None:
        """The recording mapped memory at `address`: unless that extends a segment of the
        model, it starts a new expandable segment, which the model places there."""
        if not any(seg.address + seg.size == address for seg in self.segments.values()):
            self._next_address = address

    def seed(
        self,
        segs: list[SeedSegment],
        blocks: list[tuple[int, int, int]],
        split: int | None,
        tail: Callable[[int, int, int], int],
    ) -> None:
        """Segments and live blocks (address, rounded size, requested) at the trace's
        start, made under the recorded max_split_size `split`; free space between blocks
        becomes free blocks. tail(block, gap start, gap end): the unsplit tail of a large
        block that the trace reveals (see replay)."""
        starts = sorted(b[0] for b in blocks)
        by_addr = {b[0]: b for b in blocks}
        for address, size, stream, expandable, small in segs:
            pool = self.small if small else self.large
            seg = Segment(address, size, pool, stream, [], expandable)
            self.segments[address] = seg
            self._add_reserved(size)
            lo = int(np.searchsorted(starts, address))
            hi = int(np.searchsorted(starts, address + size))
            pieces: list[Block] = []
            at = address
            for k in range(lo, hi):
                b_addr, b_size, requested = by_addr[starts[k]]
                if b_addr > at:
                    pieces.append(Block(at, b_addr - at, seg))
                end = min(starts[k + 1] if k + 1 < hi else address + size, address + size)
                gap = end - (b_addr + b_size)
                if pool.is_small or expandable or gap <= 0:
                    pass  # small-pool and expandable blocks are split to 512 bytes
                elif split is not None and b_size >= split:
                    b_size += gap  # an oversize block is never split
                elif gap <= K_SMALL_SIZE:
                    b_size += gap  # the unsplit tail of a large-pool block
                else:
                    b_size += tail(b_addr, b_addr + b_size, end)
                block = Block(b_addr, min(b_size, address + size - b_addr), seg)
                block.allocated, block.requested = True, requested
                self.live[b_addr] = block
                self.allocated += block.size
                self.requested += requested
                pieces.append(block)
                at = b_addr + block.size
            if at < address + size:
                pieces.append(Block(at, address + size - at, seg))
            for prev, nxt in zip(pieces, pieces[1:]):
                prev.next, nxt.prev = nxt, prev
            seg.head = pieces[0] if pieces else None
            for p in pieces:
                if not p.allocated:
                    pool.insert(p)
        self.peak_allocated = self.allocated


def replay(
    dev: DeviceTrace,
    settings: AllocatorSettings | None = None,
    label: str = "",
    capacity: int | None = None,
) -> Replay:
    """Replay `dev`'s requests through the model with `settings` (default: the recorded
    ones) and compare the reserved bytes after each alloc and free with the recording.

    With `capacity` (bytes PyTorch may reserve, e.g. reserved + device_free at an OOM), the
    model frees its cache and retries as PyTorch does when a segment does not fit, and the
    trace's failed requests (oom entries) are asked again (then freed at once, as the
    program went on without them); `failed` counts the requests that still did not fit."""
    recorded = recorded_settings(dev.snapshot.allocator_settings)
    model = _Replayer(settings or recorded, capacity)
    same = settings is None or settings == recorded
    tracker = segment_tracker(dev)
    tracker.rewind_to(-1)
    pre = np.flatnonzero(dev.alloc_event < 0)
    # a block still there at the end has its size in the final segments; the others are
    # their request rounded (and extended over an unsplit tail when seeded)
    seg = dev.snapshot.segments
    final = seg.block_segment[seg.block_state != 0]
    on_device = np.isin(final, seg.of_device(dev.device))
    held = seg.block_state != 0
    final_size = dict(
        zip(seg.block_address[held][on_device].tolist(), seg.block_size[held][on_device].tolist())
    )
    to_end = (dev.free_event[pre] >= dev.n_events).tolist()
    blocks = [
        (a, final_size.get(a, 0) if end else 0, r)
        for a, r, end in zip(dev.alloc_addr[pre].tolist(), dev.alloc_size[pre].tolist(), to_end)
    ]
    blocks = [(a, n or round_size(r, recorded), r) for a, n, r in blocks]
    made = np.flatnonzero(dev.alloc_event >= 0)
    made_addr = dev.alloc_addr[made].astype(np.int64)
    made_event = dev.alloc_event[made]
    freed_at = dict(zip(dev.alloc_addr[pre].tolist(), dev.free_event[pre].tolist()))

    def tail(block: int, lo: int, hi: int) -> int:
        # The first allocation of the trace in the free space after a block older than
        # the trace, made while that block lives, lands at the start of a free block: what
        # lies between them (at most 1 MiB) was the block's unsplit tail.
        inside = (made_addr >= lo) & (made_addr < hi) & (made_event < freed_at[block])
        if not inside.any():
            return 0
        first = int(made_addr[inside][np.argmin(made_event[inside])]) - lo
        return first if first <= K_SMALL_SIZE else 0

    model.seed(
        _start_segments(dev, *tracker.arrays(), blocks), blocks, recorded.max_split_size, tail
    )
    start = model.reserved
    model.peak_reserved = start

    n = dev.n_events
    act, row_of = dev.action, dev.alloc_row
    free_event, sizes = dev.free_event, dev.alloc_size
    streams = dev.alloc_stream
    # The model's address of every allocation row (older ones sit at their real address).
    where = dev.alloc_addr.astype(np.int64).copy()
    out = np.empty(n, dtype=np.int64)
    seg_alloc, seg_free = Action.SEGMENT_ALLOC, Action.SEGMENT_FREE
    unmap, alloc = Action.SEGMENT_UNMAP, Action.ALLOC
    prev, failed = -1, 0
    for i in range(n):
        a = int(act[i])
        r = int(row_of[i])
        if a == alloc and r >= 0:
            if prev == seg_alloc:
                model.hint = (int(dev.addr[i - 1]), int(dev.size[i - 1]))
            elif prev == Action.SEGMENT_MAP and model.settings.expandable_segments:
                model.new_range_at(int(dev.addr[i - 1]))
            try:
                where[r] = model.malloc(int(sizes[r]), int(streams[r]))
            except SimulatedOOM:
                failed += 1
                where[r] = -1
            model.hint = None
        elif a == Action.OOM and capacity is not None:
            try:
                model.free(model.malloc(int(dev.size[i]), int(dev.stream[i])))
            except SimulatedOOM:
                failed += 1
        elif r >= 0 and a != alloc and int(free_event[r]) == i and int(where[r]) in model.live:
            model.free(int(where[r]))
        elif a == seg_free and same:
            # the recorded allocator released this segment (empty_cache, or only the
            # oversize ones when a request did not fit): release the same one
            model.release_segment(int(dev.addr[i]))
        elif a in (seg_free, unmap) and prev not in (seg_free, unmap):
            model.empty_cache()  # the program's torch.cuda.empty_cache() (or an OOM retry)
        out[i] = model.reserved
        prev = a
    checked = np.isin(act, np.asarray([alloc, Action.FREE_REQUESTED, Action.FREE_COMPLETED]))
    differ = np.flatnonzero(checked & (out != dev.reserved_after))
    conf = label or _describe(settings or recorded)
    in_trace = dev.alloc_event >= 0
    moved = int(np.count_nonzero(where[in_trace] != dev.alloc_addr[in_trace].astype(np.int64)))
    return Replay(
        conf,
        max(start, model.peak_reserved),
        out,
        int(checked.sum()),
        len(differ),
        int(differ[0]) if len(differ) else -1,
        moved,
        failed,
    )


def _start_segments(
    dev: DeviceTrace,
    address: np.ndarray,
    size: np.ndarray,
    stream: np.ndarray,
    expandable: np.ndarray,
    blocks: list[tuple[int, int, int]],
) -> list[SeedSegment]:
    """The segments at the trace's start with their pool: the final segments' type where
    the segment lasts to the end; else a block in it over 1 MiB (a large-pool request)
    makes it large, and without one a 2 MiB segment is small (an expandable one with no
    block is taken as large)."""
    seg = dev.snapshot.segments
    rows = seg.of_device(dev.device)
    final = dict(zip(seg.address[rows].tolist(), (~seg.is_large[rows]).tolist()))
    starts = np.asarray(sorted(b[0] for b in blocks), dtype=np.int64)
    sizes = np.asarray([b[1] for b in sorted(blocks)], dtype=np.int64)
    out: list[SeedSegment] = []
    for a, n, st, ex in zip(address.tolist(), size.tolist(), stream.tolist(), expandable.tolist()):
        small = final.get(a)
        if small is None:
            inside = sizes[np.searchsorted(starts, a) : np.searchsorted(starts, a + n)]
            small = not (inside > K_SMALL_SIZE).any() and (len(inside) > 0 or not ex)
            small = small and (ex or n <= K_SMALL_BUFFER)
        out.append((a, n, st, bool(ex), bool(small)))
    return out


def _describe(s: AllocatorSettings) -> str:
    parts = [f"expandable_segments:{s.expandable_segments}"]
    if s.max_split_size is not None:
        parts.append(f"max_split_size_mb:{s.max_split_size >> 20}")
    if any(s.roundup_power2_divisions):
        parts.append(f"roundup_power2_divisions:{s.roundup_power2_divisions[0]}")
    return ",".join(parts)

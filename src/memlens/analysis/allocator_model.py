"""A pure-Python model of PyTorch's CUDA caching allocator (one device).

Modelled on the logic of c10/cuda/CUDACachingAllocator.cpp (read, not copied): the
constants, `round_size`, `get_allocation_size`, best-fit `get_free_block`, `should_split`,
block merging in `free_block`, `release_cached_blocks` (empty_cache), the OOM retry order
and expandable segments. It emits trace entries and segments in the exact dict format of
`torch.cuda.memory._snapshot()`.

Private pools (a CUDA graph's, `beginAllocateToPool` / `endAllocateToPool` /
`releasePool`): while a capture is underway, requests on its stream go to the pool's own
small and large free lists and segments (`segment_pool_id` is the pool's id); blocks freed
later go back to that pool; its free segments are released by `empty_cache` (or the OOM
retry) only once no graph uses the pool any more.

Left out on purpose: cross-stream events (whoever calls `free_request` says when the free
completes), the garbage-collection threshold, and any memory that does not go through the
allocator (CUDA context, NCCL buffers).
"""

from __future__ import annotations

import bisect
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from memlens.errors import MemlensError

KB = 1024
MB = 1024 * KB
K_MIN_BLOCK_SIZE = 512  # every block is a multiple of this
K_SMALL_SIZE = 1 * MB  # requests up to this go to the small pool
K_SMALL_BUFFER = 2 * MB  # small-pool segment size
K_LARGE_BUFFER = 20 * MB  # segment for 1-10 MiB requests; expandable large-pool page
K_MIN_LARGE_ALLOC = 10 * MB  # from here segments are the request rounded to 2 MiB
K_ROUND_LARGE = 2 * MB
BASE_ADDRESS = 0x7F0000000000  # where simulated virtual addresses start
EXPANDABLE_RESERVE = 1 << 40  # virtual range reserved per expandable segment

Frames = list[dict[str, Any]]  # {"filename", "line", "name"} dicts


class SimulatedOOM(Exception):
    """Raised when reserving another segment would exceed the device memory."""

    def __init__(self, size: int, requested: int, device_free: int, reserved: int, allocated: int):
        self.size, self.requested = size, requested
        self.device_free, self.reserved, self.allocated = device_free, reserved, allocated
        super().__init__(f"out of memory: tried to reserve {size} bytes, {device_free} free")


@dataclass
class AllocatorSettings:
    """The subset of PYTORCH_CUDA_ALLOC_CONF the model honours."""

    max_split_size: int | None = None  # bytes; None = unlimited
    roundup_power2_divisions: list[int] = field(default_factory=lambda: [0] * 16)
    expandable_segments: bool = False

    @classmethod
    def parse(cls, conf: str) -> AllocatorSettings:
        """Parse a PYTORCH_CUDA_ALLOC_CONF string (`key:value,key:[k:v,...],...`)."""
        settings = cls()
        # Split on commas outside brackets: roundup_power2_divisions may hold a list.
        for key, value in re.findall(r"([a-z_0-9]+)\s*:\s*(\[[^\]]*\]|[^,]*)", conf):
            try:
                if key == "max_split_size_mb":
                    settings.max_split_size = int(value) * MB
                elif key == "expandable_segments":
                    settings.expandable_segments = value.strip().lower() == "true"
                elif key == "roundup_power2_divisions":
                    settings.roundup_power2_divisions = _parse_divisions(value.strip())
            except ValueError:
                raise MemlensError(f"cannot read {key}:{value} in the allocator settings") from None
        return settings

    def as_snapshot_dict(self, conf: str = "") -> dict[str, Any]:
        return {
            "PYTORCH_CUDA_ALLOC_CONF": conf,
            "max_split_size": -1 if self.max_split_size is None else self.max_split_size,
            "garbage_collection_threshold": 0.0,
            "expandable_segments": self.expandable_segments,
            "pinned_num_register_threads": 1,
            "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False,
            "roundup_power2_divisions": {
                str(1 << i): d for i, d in enumerate(self.roundup_power2_divisions)
            },
        }


def _parse_divisions(value: str) -> list[int]:
    """`4` for every size, or `[256:1,512:2,>:8]`: keys are interval starts in MiB."""
    if not value.startswith("["):
        return [int(value)] * 16
    divisions = [0] * 16
    last = -1  # index of the last interval named explicitly; ">" covers the rest
    for item in filter(None, (p.strip() for p in value.strip("[]").split(","))):
        key, _, count = item.partition(":")
        index = last + 1 if key.strip() == ">" else min(max(int(key).bit_length() - 1, 0), 15)
        divisions[index:] = [int(count)] * (16 - index)
        last = index
    return divisions


def _divisions_for(size: int, divisions: list[int]) -> int:
    # One setting per power-of-two interval of the size in MiB (<1 MiB uses the first).
    mb = size >> 20
    index = 0 if mb == 0 else min(mb.bit_length() - 1, len(divisions) - 1)
    return divisions[index]


def round_size(size: int, settings: AllocatorSettings | None = None) -> int:
    """The block size the allocator hands out for a request of `size` bytes."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = _divisions_for(size, settings.roundup_power2_divisions) if settings else 0
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return _roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    step = floor // (1 << (divisions.bit_length() - 1))
    if step == 0:
        return floor << 1
    rounded = size & ~(step - 1)
    return size if rounded == size else rounded + step


def allocation_size(size: int) -> int:
    """Segment size reserved when a rounded request of `size` finds no cached block."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class Segment:
    __slots__ = ("address", "size", "pool", "stream", "frames", "expandable", "head")

    def __init__(
        self, address: int, size: int, pool: Pool, stream: int, frames: Frames, expandable: bool
    ):
        self.address, self.size, self.pool, self.stream = address, size, pool, stream
        self.frames, self.expandable = frames, expandable
        self.head: Block | None = None


class Block:
    __slots__ = ("address", "size", "requested", "allocated", "segment", "prev", "next", "frames")

    def __init__(self, address: int, size: int, segment: Segment):
        self.address, self.size, self.segment = address, size, segment
        self.requested = 0
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.frames: Frames = []

    def key(self) -> tuple[int, int, int]:
        return (self.segment.stream, self.size, self.address)


DEFAULT_POOL = (0, 0)  # the id snapshots give segments of the default pools
PoolId = tuple[int, int]


class Pool:
    """Free blocks of one pool, kept sorted by (stream, size, address) for best fit.
    `pool_id` is its owner's: (0, 0) for the default pools, else a private pool's."""

    def __init__(self, is_small: bool, pool_id: PoolId = DEFAULT_POOL):
        self.is_small = is_small
        self.pool_id = pool_id
        self.keys: list[tuple[int, int, int]] = []
        self.blocks: dict[tuple[int, int, int], Block] = {}

    def insert(self, block: Block) -> None:
        key = block.key()
        bisect.insort(self.keys, key)
        self.blocks[key] = block

    def remove(self, block: Block) -> None:
        key = block.key()
        del self.keys[bisect.bisect_left(self.keys, key)]
        del self.blocks[key]

    def candidates(self, stream: int, size: int) -> Iterator[Block]:
        """Free blocks of `stream` with size >= `size`, smallest first."""
        i = bisect.bisect_left(self.keys, (stream, size, -1))
        while i < len(self.keys) and self.keys[i][0] == stream:
            yield self.blocks[self.keys[i]]
            i += 1


class PrivatePool:
    """A CUDA graph's memory pool (CUDACachingAllocator's PrivatePool): its own small and
    large free lists; `use_count` graphs capture into or hold it."""

    def __init__(self, pool_id: PoolId):
        self.small = Pool(True, pool_id)
        self.large = Pool(False, pool_id)
        self.use_count = 1


class CachingAllocator:
    """One device's caching allocator. Sizes in bytes; addresses are simulated."""

    def __init__(
        self,
        device_memory: int | None = None,
        settings: AllocatorSettings | None = None,
        clock: Callable[[], int] | None = None,
        *,
        base_address: int = BASE_ADDRESS,
        entry_fields: dict[str, Any] | None = None,
        addresses_descend: bool = False,
    ) -> None:
        self.settings = settings or AllocatorSettings()
        self.device_memory = device_memory
        self.small = Pool(True)
        self.large = Pool(False)
        self.private_pools: dict[PoolId, PrivatePool] = {}
        self.freeable_pools: list[PoolId] = []  # used by no graph any more (releasePool)
        self.captures: list[tuple[PoolId, int]] = []  # (pool, stream) of captures underway
        self.segments: dict[int, Segment] = {}
        self.live: dict[int, Block] = {}  # address -> allocated block
        self.trace: list[dict[str, Any]] = []
        self.reserved = 0
        self.allocated = 0  # rounded bytes handed out
        self.requested = 0  # requested bytes handed out
        self.peak_allocated = 0
        self.peak_reserved = 0
        self._next_address = base_address
        # Best fit breaks ties between free blocks of one size by address (lowest first),
        # so where new segments land decides which of two equal blocks is reused. CUDA's
        # driver hands out mostly decreasing virtual addresses (a GPU recording's final
        # segments: parameters made first lie highest), so the newest segment's block
        # wins; `addresses_descend` places each new segment below the previous one.
        self._descend = addresses_descend
        self._clock: Callable[[], int] = clock or (lambda: int(time.time() * 1e6))
        # added to every trace entry (PyTorch >= 2.5 records compile_context, user_metadata)
        self._entry_fields = entry_fields or {}

    # ---------------------------------------------------------------- public API
    def malloc(self, requested: int, stream: int = 0, frames: Frames | None = None) -> int:
        """Allocate `requested` bytes; returns the block address. Raises SimulatedOOM."""
        frames = frames or []
        size = round_size(requested, self.settings)
        pool = self._pool_for(size, stream)
        block = self._get_free_block(pool, stream, size)
        if block is None:
            block = self._new_block(pool, stream, size, frames)
        return self._alloc_found_block(block, pool, size, requested, frames)

    def free(self, address: int, frames: Frames | None = None) -> None:
        self.free_request(address, frames)
        self.free_complete(address, frames)

    def free_request(self, address: int, frames: Frames | None = None) -> None:
        """The tensor is freed, but its block is still in use on another stream
        (record_stream): it holds its memory until free_complete."""
        block = self.live[address]
        frames = frames if frames is not None else block.frames
        self._record("free_requested", address, block.requested, block.segment.stream, frames)

    def free_complete(self, address: int, frames: Frames | None = None) -> None:
        """The last stream using the block is done: the block goes back to its pool."""
        block = self.live.pop(address)
        frames = frames if frames is not None else block.frames
        block.allocated = False
        self.allocated -= block.size
        self.requested -= block.requested
        self._record("free_completed", address, block.requested, block.segment.stream, frames)
        block.requested = 0
        block.frames = []
        self._merge_and_insert(block)

    def empty_cache(self, frames: Frames | None = None) -> None:
        """Return every fully free segment to the device (torch.cuda.empty_cache)."""
        frames = frames or []
        for pool in (self.large, self.small):  # the order release_cached_blocks uses
            self._release_free_segments(pool, frames)
        # then the pools no graph uses any more; one left with no segment is forgotten
        for pool_id in list(self.freeable_pools):
            private = self.private_pools[pool_id]
            self._release_free_segments(private.small, frames)
            self._release_free_segments(private.large, frames)
            if not any(
                seg.pool in (private.small, private.large) for seg in self.segments.values()
            ):
                del self.private_pools[pool_id]
                self.freeable_pools.remove(pool_id)

    def begin_allocate_to_pool(self, pool_id: PoolId, stream: int) -> None:
        """A capture starts (beginAllocateToPool): `stream`'s requests go to the private
        pool `pool_id`, made now unless an earlier capture shares it."""
        if any(p == pool_id for p, _ in self.captures):
            raise MemlensError(f"a capture into memory pool {pool_id} is already underway")
        private = self.private_pools.get(pool_id)
        if private is None:
            self.private_pools[pool_id] = PrivatePool(pool_id)
        else:
            private.use_count += 1
        self.captures.append((pool_id, stream))

    def join_capture(self, pool_id: PoolId, stream: int) -> None:
        """`stream` joins the capture into `pool_id` underway (it waited on work the capture
        recorded, so CUDA names that capture for it: beginAllocateToPool's filter then
        sends its requests to the pool too, until the capture ends)."""
        if not any(p == pool_id for p, _ in self.captures):
            raise MemlensError(f"no capture into memory pool {pool_id} is underway")
        if (pool_id, stream) not in self.captures:
            self.captures.append((pool_id, stream))

    def end_allocate_to_pool(self, pool_id: PoolId) -> None:
        """The capture into `pool_id` ends (endAllocateToPool); the pool stays."""
        self.captures = [(p, s) for p, s in self.captures if p != pool_id]

    def release_pool(self, pool_id: PoolId) -> None:
        """A graph using `pool_id` is destroyed or reset (releasePool): when none is left,
        empty_cache may return the pool's free segments."""
        private = self.private_pools[pool_id]
        private.use_count -= 1
        if private.use_count == 0:
            self.freeable_pools.append(pool_id)

    # ------------------------------------------------------------ internals
    def _pool_for(self, size: int, stream: int) -> Pool:
        # get_pool: a capture underway on this stream takes the request into its pool
        for pool_id, capturing in self.captures:
            if capturing == stream:
                private = self.private_pools[pool_id]
                return private.small if size <= K_SMALL_SIZE else private.large
        return self.small if size <= K_SMALL_SIZE else self.large

    def _release_free_segments(self, pool: Pool, frames: Frames) -> None:
        for block in [pool.blocks[k] for k in list(pool.keys)]:
            self._release_if_whole_segment(block, frames)

    def _record(self, action: str, addr: int, size: int, stream: int, frames: Frames) -> None:
        self.trace.append(
            {
                "action": action,
                "addr": addr,
                "size": size,
                "stream": stream,
                "time_us": self._clock(),
                "frames": frames,
                **self._entry_fields,
            }
        )

    def _get_free_block(self, pool: Pool, stream: int, size: int) -> Block | None:
        max_split = self.settings.max_split_size
        for block in pool.candidates(stream, size):
            if max_split is not None:
                # Oversize blocks are kept for oversize requests, and only reused when
                # they waste less than one large buffer.
                if size < max_split and block.size >= max_split:
                    return None
                if size >= max_split and block.size >= size + K_LARGE_BUFFER:
                    return None
            pool.remove(block)
            return block
        return None

    def _new_block(self, pool: Pool, stream: int, size: int, frames: Frames) -> Block:
        if self.settings.expandable_segments:
            grow = self._expandable_growth(pool, stream, size)
            attempt: Callable[[], Block] = lambda: self._map_expandable(pool, stream, size, frames)  # noqa: E731
            need = grow
        else:
            need = allocation_size(size)
            attempt = lambda: self._alloc_segment(pool, stream, need, frames)  # noqa: E731
        if not self._fits(need) and not self.settings.expandable_segments:
            self._release_oversize_blocks(pool, stream, size, frames)
        if not self._fits(need):
            # Then every cached segment goes back (release_cached_blocks) and it retries.
            self.empty_cache(frames)
            if self.settings.expandable_segments:
                need = self._expandable_growth(pool, stream, size)
            if not self._fits(need):
                device_free = (self.device_memory or 0) - self.reserved
                self.trace.append(
                    {
                        "action": "oom",
                        "device_free": device_free,
                        "size": size,
                        "stream": stream,
                        "time_us": self._clock(),
                        "frames": frames,
                    }
                )
                raise SimulatedOOM(size, size, device_free, self.reserved, self.allocated)
        return attempt()

    def _release_oversize_blocks(self, pool: Pool, stream: int, size: int, frames: Frames) -> None:
        """release_available_cached_blocks: free cached oversize segments (only with
        max_split_size): the smallest one big enough, else the largest ones in turn."""
        max_split = self.settings.max_split_size
        if max_split is None:
            return
        target = max(size, max_split)
        candidates = [
            b
            for b in pool.candidates(stream, 0)
            if b.size >= max_split and b.prev is None and b.next is None
        ]
        big_enough = [b for b in candidates if b.size >= target]
        if big_enough:
            self._release_if_whole_segment(big_enough[0], frames)
            return
        released = 0
        for block in reversed(candidates):
            if released >= target:
                break
            released += block.size
            self._release_if_whole_segment(block, frames)

    def _fits(self, extra: int) -> bool:
        return self.device_memory is None or self.reserved + extra <= self.device_memory

    def _take_address(self, size: int) -> int:
        """The start of a fresh virtual range of `size` bytes (2 MiB granules)."""
        span = -(-size // K_ROUND_LARGE) * K_ROUND_LARGE
        if self._descend:
            self._next_address -= span
            return self._next_address
        address = self._next_address
        self._next_address += span
        return address

    def _alloc_segment(self, pool: Pool, stream: int, size: int, frames: Frames) -> Block:
        segment = Segment(self._take_address(size), size, pool, stream, frames, False)
        block = Block(segment.address, size, segment)
        segment.head = block
        self.segments[segment.address] = segment
        self._add_reserved(size)
        self._record("segment_alloc", segment.address, size, stream, frames)
        return block

    def _add_reserved(self, delta: int) -> None:
        self.reserved += delta
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    # Expandable segments: one growing virtual range per (pool, stream); pages are mapped
    # at its end in 2 MiB (small pool) or 20 MiB (large pool) steps.
    def _expandable_segment(self, pool: Pool, stream: int) -> Segment | None:
        for seg in self.segments.values():
            if seg.expandable and seg.pool is pool and seg.stream == stream:
                return seg
        return None

    def _expandable_growth(self, pool: Pool, stream: int, size: int) -> int:
        page = K_SMALL_BUFFER if pool.is_small else K_LARGE_BUFFER
        seg = self._expandable_segment(pool, stream)
        tail = self._tail(seg) if seg else None
        have = tail.size if tail is not None and not tail.allocated else 0
        return -(-(size - have) // page) * page

    @staticmethod
    def _tail(seg: Segment) -> Block | None:
        block = seg.head
        while block is not None and block.next is not None:
            block = block.next
        return block

    def _map_expandable(self, pool: Pool, stream: int, size: int, frames: Frames) -> Block:
        grow = self._expandable_growth(pool, stream, size)
        seg = self._expandable_segment(pool, stream)
        if seg is None:
            seg = Segment(self._take_address(EXPANDABLE_RESERVE), 0, pool, stream, frames, True)
            self.segments[seg.address] = seg
        start = seg.address + seg.size
        seg.size += grow
        self._add_reserved(grow)
        self._record("segment_map", start, grow, stream, frames)
        tail = self._tail(seg)
        if tail is not None and not tail.allocated:
            pool.remove(tail)
            tail.size += grow
            return tail
        block = Block(start, grow, seg)
        if tail is None:
            seg.head = block
        else:
            tail.next, block.prev = block, tail
        return block

    def _alloc_found_block(
        self, block: Block, pool: Pool, size: int, requested: int, frames: Frames
    ) -> int:
        remaining = block.size - size
        if self._should_split(block, size, remaining):
            rest = Block(block.address + size, remaining, block.segment)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            pool.insert(rest)
        block.allocated = True
        block.requested = requested
        block.frames = frames
        self.live[block.address] = block
        self.allocated += block.size
        self.requested += requested
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self._record("alloc", block.address, requested, block.segment.stream, frames)
        return block.address

    def _should_split(self, block: Block, size: int, remaining: int) -> bool:
        if block.segment.pool.is_small or block.segment.expandable:
            return remaining >= K_MIN_BLOCK_SIZE
        max_split = self.settings.max_split_size
        return (max_split is None or size < max_split) and remaining > K_SMALL_SIZE

    def _merge_and_insert(self, block: Block) -> None:
        pool = block.segment.pool
        for neighbour in (block.prev, block.next):
            if neighbour is None or neighbour.allocated:
                continue
            pool.remove(neighbour)
            if neighbour is block.prev:
                block.address = neighbour.address
                block.prev = neighbour.prev
                if block.prev is not None:
                    block.prev.next = block
                else:
                    block.segment.head = block
            else:
                block.next = neighbour.next
                if block.next is not None:
                    block.next.prev = block
            block.size += neighbour.size
        pool.insert(block)

    def _release_if_whole_segment(self, block: Block, frames: Frames) -> None:
        seg = block.segment
        pool = seg.pool
        if seg.expandable:
            # Unmap the free tail, whole pages only, as unmap_block would.
            page = K_SMALL_BUFFER if pool.is_small else K_LARGE_BUFFER
            if block.next is not None:
                return
            offset = block.address - seg.address
            start = -(-offset // page) * page
            unmap = seg.size - start
            if unmap <= 0:
                return
            pool.remove(block)
            seg.size -= unmap
            self.reserved -= unmap
            self._record("segment_unmap", seg.address + start, unmap, seg.stream, frames)
            block.size -= unmap
            if block.size > 0:
                pool.insert(block)
            elif block.prev is not None:
                block.prev.next = None
            else:
                seg.head = None
            return
        if block.prev is not None or block.next is not None:
            return
        pool.remove(block)
        del self.segments[seg.address]
        self.reserved -= seg.size
        self._record("segment_free", seg.address, seg.size, seg.stream, frames)

    # ------------------------------------------------------------ snapshot
    def segments_snapshot(self, device: int = 0) -> list[dict[str, Any]]:
        """`segments` in the format of torch.cuda.memory._snapshot(), sorted by address."""
        out: list[dict[str, Any]] = []
        for address in sorted(self.segments):
            seg = self.segments[address]
            if seg.head is None or seg.size == 0:
                continue
            blocks: list[dict[str, Any]] = []
            block: Block | None = seg.head
            while block is not None:
                blocks.append(
                    {
                        "address": block.address,
                        "size": block.size,
                        "requested_size": block.requested,
                        "state": "active_allocated" if block.allocated else "inactive",
                        "frames": block.frames,
                    }
                )
                block = block.next
            allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
            out.append(
                {
                    "device": device,
                    "address": seg.address,
                    "total_size": seg.size,
                    "allocated_size": allocated,
                    "active_size": allocated,
                    "requested_size": sum(b["requested_size"] for b in blocks),
                    "stream": seg.stream,
                    "segment_type": "small" if seg.pool.is_small else "large",
                    "segment_pool_id": seg.pool.pool_id,
                    "is_expandable": seg.expandable,
                    "frames": seg.frames,
                    "blocks": blocks,
                }
            )
        return out

"""The allocator requests a simulation made, in order, and their replay.

A simulated run asks the caching allocator for blocks (`malloc` of a requested size on a
stream), frees them (`free_request`/`free_complete`, by the allocation they free) and
empties its cache (`torch.cuda.empty_cache`), and a CUDA graph's capture routes a stream
to a private pool and back (`begin_allocate_to_pool`, `join_capture`,
`end_allocate_to_pool`, `release_pool`). Everything the allocator answers (segments,
splits, the reserved curve, an OOM after freeing its cache) follows from that sequence and
the settings, so replaying the sequence through the same torch-free model
(analysis/allocator_model.py) gives the run's peaks to the byte, under any capacity, in a
fraction of the simulation's time. `memlens plan --interpolate` replays sequences whose
sizes it fitted between simulated points (planning/interpolate.py).

The log holds the calls made from outside the allocator only: an `empty_cache` the
allocator makes itself when a segment does not fit is part of its `malloc`, and happens
again in the replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from memlens.analysis.allocator_model import (
    AllocatorSettings,
    CachingAllocator,
    PoolId,
    SimulatedOOM,
)

# A simulated cudaMalloc places each segment below the previous one, as a GPU's driver
# mostly does (allocator_model.CachingAllocator); the replay must place them alike.
ADDRESSES_DESCEND = True

# Kinds of request, the log's `kinds` column.
MALLOC, FREE_REQUEST, FREE_COMPLETE, EMPTY_CACHE = 0, 1, 2, 3
BEGIN_POOL, END_POOL, RELEASE_POOL = 4, 5, 6  # a CUDA graph's private pool
JOIN_POOL = 7  # another stream joins a capture (cuda_graph_streams.py)


def _pool_value(pool_id: PoolId) -> int:
    return (pool_id[0] << 32) | pool_id[1]


def _pool_id(value: int) -> PoolId:
    return (value >> 32, value & 0xFFFFFFFF)


@dataclass(frozen=True)
class RequestLog:
    """Columns of equal length: the kind of each request; its `value` (a malloc's
    requested bytes, a free's allocation number: the n-th malloc of the log, from 0; 0 for
    empty_cache; a pool request's pool id as (first << 32) | second); its stream (a
    malloc's or a capture's, else 0)."""

    kinds: np.ndarray  # int8
    values: np.ndarray  # int64
    streams: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.kinds)

    def to_json(self) -> list[list[int]]:
        return [self.kinds.tolist(), self.values.tolist(), self.streams.tolist()]

    @classmethod
    def from_json(cls, data: list[list[int]]) -> RequestLog:
        kinds, values, streams = data
        return cls(
            np.asarray(kinds, dtype=np.int8),
            np.asarray(values, dtype=np.int64),
            np.asarray(streams, dtype=np.int64),
        )

    @property
    def mallocs(self) -> np.ndarray:
        """The positions of the mallocs, whose values are sizes."""
        return np.flatnonzero(self.kinds == MALLOC)

    def aligns_with(self, other: RequestLog) -> bool:
        """The same requests in the same order, sizes aside: same kinds, same streams,
        each free freeing the same allocation."""
        if len(self) != len(other):
            return False
        if not (
            np.array_equal(self.kinds, other.kinds) and np.array_equal(self.streams, other.streams)
        ):
            return False
        frees = self.kinds != MALLOC
        return bool(np.array_equal(self.values[frees], other.values[frees]))

    def with_sizes(self, sizes: np.ndarray) -> RequestLog:
        """This log with its mallocs' sizes replaced (in malloc order)."""
        values = self.values.copy()
        values[self.mallocs] = sizes
        return RequestLog(self.kinds, values, self.streams)


class LoggingAllocator(CachingAllocator):
    """A CachingAllocator that logs the requests made to it from outside (see the module's
    docstring); the simulation session uses it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("addresses_descend", ADDRESSES_DESCEND)
        super().__init__(*args, **kwargs)
        self._kinds: list[int] = []
        self._values: list[int] = []
        self._streams: list[int] = []
        self._number: dict[int, int] = {}  # address of a live block -> its malloc's number
        self._mallocs = 0
        self._inside = 0  # calls the allocator makes of its own public methods

    def _log(self, kind: int, value: int, stream: int = 0) -> None:
        if not self._inside:
            self._kinds.append(kind)
            self._values.append(value)
            self._streams.append(stream)

    def malloc(self, requested: int, stream: int = 0, frames: Any = None) -> int:
        self._log(MALLOC, requested, stream)
        self._inside += 1
        try:
            address = super().malloc(requested, stream, frames)
        finally:
            self._inside -= 1
        self._number[address] = self._mallocs
        self._mallocs += 1
        return address

    def free_request(self, address: int, frames: Any = None) -> None:
        self._log(FREE_REQUEST, self._number[address])
        super().free_request(address, frames)

    def free_complete(self, address: int, frames: Any = None) -> None:
        self._log(FREE_COMPLETE, self._number.pop(address))
        super().free_complete(address, frames)

    def empty_cache(self, frames: Any = None) -> None:
        self._log(EMPTY_CACHE, 0)
        self._inside += 1
        try:
            super().empty_cache(frames)
        finally:
            self._inside -= 1

    def begin_allocate_to_pool(self, pool_id: PoolId, stream: int) -> None:
        self._log(BEGIN_POOL, _pool_value(pool_id), stream)
        super().begin_allocate_to_pool(pool_id, stream)

    def join_capture(self, pool_id: PoolId, stream: int) -> None:
        self._log(JOIN_POOL, _pool_value(pool_id), stream)
        super().join_capture(pool_id, stream)

    def end_allocate_to_pool(self, pool_id: PoolId) -> None:
        self._log(END_POOL, _pool_value(pool_id))
        super().end_allocate_to_pool(pool_id)

    def release_pool(self, pool_id: PoolId) -> None:
        self._log(RELEASE_POOL, _pool_value(pool_id))
        super().release_pool(pool_id)

    def request_log(self) -> RequestLog:
        return RequestLog(
            np.asarray(self._kinds, dtype=np.int8),
            np.asarray(self._values, dtype=np.int64),
            np.asarray(self._streams, dtype=np.int64),
        )


class _Untraced(CachingAllocator):
    """The model without its trace entries: a replay keeps the peaks only."""

    def _record(self, action: str, addr: int, size: int, stream: int, frames: Any) -> None:
        pass


@dataclass(frozen=True)
class Replayed:
    """The peaks of a replay (up to the request that did not fit, when one did not)."""

    peak_active: int
    peak_reserved: int
    oom: bool


def replay_log(
    log: RequestLog, capacity: int | None, settings: AllocatorSettings | None = None
) -> Replayed:
    """Replay `log` through a fresh model with `capacity` bytes (None: unlimited): the
    model frees its cache and retries as the simulation's allocator does; the first
    request that still does not fit ends the run, as the script's OOM would."""
    model = _Untraced(
        capacity,
        settings or AllocatorSettings(),
        clock=lambda: 0,
        addresses_descend=ADDRESSES_DESCEND,
    )
    where: list[int] = []
    kinds, values, streams = log.kinds.tolist(), log.values.tolist(), log.streams.tolist()
    oom, peak_active = False, 0
    for kind, value, stream in zip(kinds, values, streams, strict=True):
        if kind == MALLOC:
            try:
                where.append(model.malloc(value, stream))
            except SimulatedOOM:
                oom = True
                break
            # active memory as a snapshot counts it: the bytes requested, not rounded
            peak_active = max(peak_active, model.requested)
        elif kind == FREE_REQUEST:
            model.free_request(where[value])
        elif kind == FREE_COMPLETE:
            model.free_complete(where[value])
        elif kind == BEGIN_POOL:
            model.begin_allocate_to_pool(_pool_id(value), stream)
        elif kind == JOIN_POOL:
            model.join_capture(_pool_id(value), stream)
        elif kind == END_POOL:
            model.end_allocate_to_pool(_pool_id(value))
        elif kind == RELEASE_POOL:
            model.release_pool(_pool_id(value))
        else:
            model.empty_cache()
    return Replayed(peak_active, model.peak_reserved, oom)

"""CUDA graphs in a simulation: `torch.cuda.CUDAGraph`, `torch.cuda.graph`,
`torch.cuda.graph_pool_handle` and `torch.cuda.make_graphed_callables`.

What a GPU does with memory, after c10/cuda/CUDACachingAllocator.cpp and CUDAGraph.cpp:
- `capture_begin` (inside `torch.cuda.graph`, which first empties the cache and makes the
  capture stream current) calls `beginAllocateToPool`: until `capture_end`, every request
  on the capturing stream, and on every stream that joined the capture by waiting on it
  (cuda_graph_streams.py), is served from the graph's private pool, its own segments
  (`segment_pool_id` the pool's id). The code runs once, as here: frees during capture go
  back to the pool and are reused inside it.
- The pool's id: the one passed (`pool=`, a `graph_pool_handle()` = (0, n) or another
  graph's `pool()`), else a new (n, 0); both counters start at 1 (c10::cuda::MemPool).
- `replay()` runs the captured kernels on the same addresses: it allocates nothing, and
  the static outputs are the tensors the capture made, in the pool.
- `reset()` (also when the graph is destroyed) calls `releasePool`: once no graph uses
  the pool, `empty_cache` (or an OOM retry) returns its free segments.
- The CUDA generator registers with the first graph that captures (CUDAGeneratorState
  `register_graph`): its seed and offset for graph-safe RNG, one int64 each (8 bytes
  requested), are allocated then on the capturing stream before the pool takes over (so
  in the default pool), and freed when the last registered graph is reset.
`torch.cuda.graph` and `make_graphed_callables` are PyTorch's own Python, run unchanged on
this CUDAGraph (their warm-up on a side stream, the shared pool, the graphed autograd
Function whose forward and backward replay).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import torch

from memlens.simulation.patches import cuda_graph_streams, cuda_stubs

if TYPE_CHECKING:
    from memlens.analysis.allocator_model import CachingAllocator, PoolId
    from memlens.simulation.host import SimulationHost
    from memlens.simulation.patches.fake_cuda import Patches


class PoolIds:
    """c10::cuda::MemPool's two counters, per simulation: a graph's own pool is (uid, 0),
    a `graph_pool_handle()` (user-made) is (0, uuid)."""

    def __init__(self) -> None:
        self._uid = itertools.count(1)
        self._uuid = itertools.count(1)

    def graph_pool(self) -> PoolId:
        return (next(self._uid), 0)

    def user_pool(self) -> PoolId:
        return (0, next(self._uuid))


def _pool_id(handle: Any) -> PoolId:
    """A pool handle as code passes it: a (p0, p1) tuple or torch.cuda._POOL_HANDLE."""
    first, second = tuple(handle)
    return (int(first), int(second))


class GeneratorState:
    """The CUDA generator's graph-safe seed and offset (two 8-byte blocks), held while
    any graph that captured is registered."""

    def __init__(self, sim: SimulationHost) -> None:
        self.sim = sim
        self.graphs = 0
        self.blocks: list[int] = []

    def register(self) -> None:
        if self.graphs == 0:
            self.blocks = [self.sim._malloc(8), self.sim._malloc(8)]
        self.graphs += 1

    def unregister(self) -> None:
        self.graphs -= 1
        if self.graphs == 0:
            frames = self.sim._stack()
            for address in self.blocks:
                self.sim.allocator.free(address, frames)
            self.blocks = []


def make_graph_class(
    sim: SimulationHost, ids: PoolIds, captures: cuda_graph_streams.Captures
) -> type:
    """torch.cuda.CUDAGraph for one simulation's allocator."""
    allocator: CachingAllocator = sim.allocator
    generator = GeneratorState(sim)

    class CUDAGraph:
        """torch.cuda.CUDAGraph whose capture routes the capturing stream's requests to
        a private pool and whose replay allocates nothing (see the module docstring)."""

        def __init__(self, keep_graph: bool = False) -> None:
            self._pool: PoolId | None = None
            self._capture: int | None = None  # the capture underway (its id)
            self._captured = False

        def capture_begin(
            self, pool: Any = None, capture_error_mode: str = "global", **kwargs: Any
        ) -> None:
            given = _pool_id(pool) if pool is not None else (0, 0)
            self._pool = ids.graph_pool() if given == (0, 0) else given
            generator.register()
            self._capture = captures.begin(self._pool, cuda_stubs.current_stream_id())

        def capture_end(self) -> None:
            if self._capture is None:
                raise RuntimeError("CUDAGraph.capture_end called without capture_begin")
            captures.end(self._capture)
            self._capture = None
            self._captured = True

        def instantiate(self) -> None:
            pass

        def replay(self) -> None:
            # the captured kernels rewrite the pool's blocks in place: no allocation
            if not self._captured:
                raise RuntimeError("CUDAGraph.replay called before a capture ended")

        def reset(self) -> None:
            if self._captured and self._pool is not None:
                allocator.release_pool(self._pool)
                generator.unregister()
            self._captured = False

        def pool(self) -> tuple[int, int]:
            if self._pool is None:
                raise RuntimeError("CUDAGraph.pool called before capture_begin")
            return self._pool

        def enable_debug_mode(self) -> None:
            pass

        def debug_dump(self, debug_path: str) -> None:
            pass

        def __del__(self) -> None:
            # the real destructor calls reset(); the simulation's allocator outlives no run
            if allocator.private_pools.get(self._pool or (0, 0)) is not None:
                self.reset()

    return CUDAGraph


def install(patches: Patches, sim: SimulationHost) -> None:
    """Put the graph class and pool handles in torch.cuda (and torch.cuda.graphs, whose
    `graph` and `make_graphed_callables` look them up there)."""
    import torch.cuda.graphs as graphs

    ids = PoolIds()
    captures = cuda_graph_streams.Captures(sim.allocator)
    cuda_graph_streams.install(patches, captures)
    graph_class = make_graph_class(sim, ids, captures)

    def is_capturing() -> bool:  # the current stream is part of a capture underway
        return captures.of(cuda_stubs.current_stream_id()) is not None

    def graph_pool_handle() -> Any:
        return torch.cuda._POOL_HANDLE(ids.user_pool())

    for owner in (torch.cuda, graphs):
        patches.set(owner, "CUDAGraph", graph_class)
        patches.set(owner, "graph_pool_handle", graph_pool_handle)
        patches.set(owner, "is_current_stream_capturing", is_capturing)
    patches.set(torch.cuda, "graph", graphs.graph)
    patches.set(torch.cuda, "make_graphed_callables", graphs.make_graphed_callables)
    # the capture stream is made lazily once per process: one per simulation here
    patches.set(graphs.graph, "default_capture_stream", None)
    # torch.cuda.graph empties the pinned host cache before capturing (no device memory)
    patches.set(torch._C, "_host_emptyCache", lambda: None)

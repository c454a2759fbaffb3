"""Triton autotuning at a compiled kernel's first launch, in a simulation: which Triton
kernels of an Inductor graph benchmark several configs, and the memory that takes.

What a GPU does (torch 2.13's torch/_inductor/runtime/triton_heuristics.py and
benchmarking.py; torch 2.11 recorded on an H200, tests/data/gpu/graphs/reduce_overhead):
- Inductor gives each Triton kernel a list of candidate configs (`pointwise`,
  `persistent_reduction`, `reduction`: block sizes and warps from the kernel's sizes),
  duplicates dropped (`unique_configs`). A kernel with more than one benchmarks them all
  at its first launch (`CachingAutotuner.run` -> `autotune_to_one_config` ->
  `benchmark_all_configs` -> `bench`), unless Inductor's autotune cache on disk already
  holds the winner: this model assumes a cold cache (the first run on a machine).
- Each config (`InductorBenchmarker.benchmark_gpu`): one call of the kernel, then a
  buffer of the card's L2 size (`get_device_properties().L2_cache_size`;
  `torch.empty(L2 // 4, dtype=torch.int)`), zeroed before every timed call to flush the
  cache, 5 estimation calls and up to 100 timed ones, then the buffer is freed. It is an
  ordinary allocation, on the current stream, in the current pool (under a CUDA graph
  tree's warm-up: the tree's pool, which keeps the freed segment).
- A kernel writing a buffer in place (an in_out_ptr) gets a clone of it for every call
  (`maybe_clone_args`: `clone_preserve_strides`), freed after the call; in a backward or
  inference graph (`optimize_mem`) a buffer larger than `max_memory_allocated() -
  memory_allocated()` is copied to pinned host memory instead, no device memory.
- Kernels of the same source share the cache: the second is not benchmarked.
- A kernel launches where Inductor's scheduler puts it (inductor_schedule.py), after
  its output buffers are allocated and before the buffers it last reads are freed.

Modelled, with torch's own config lists: 1-D pointwise kernels; tiled ones (a read
across rows: a transpose), square tiles (one buffer in, one out) with one config;
reductions with the hint Inductor gives them (inductor_split.py: DEFAULT, INNER, OUTER),
persistent (rows up to 64, 1024 for INNER) or not, and both kernels of a split one (the
first: `first_stage`; the second an OUTER_TINY one where few outputs); index_put's
scatter (tiled by the index's rows) and the fill of its target. Not modelled: sorts,
scans, `cat`; fewer than 100 timed calls for a kernel
slower than 0.25 ms (the clones' count, not their peak); `max-autotune`'s GEMM templates
and coordinate-descent tuning; Triton's `do_bench` (256 MiB) where Inductor's
experimental benchmarker is switched off.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torch.fx import Node

from memlens.simulation.patches.inductor_plan import Plan
from memlens.simulation.patches.inductor_schedule import (
    REDUCTIONS,
    SCATTERS,
    iteration,
    op_name,
    value,
)
from memlens.simulation.patches.inductor_split import Reduction, device_properties

if TYPE_CHECKING:
    from memlens.simulation.gpus import Gpu
    from memlens.simulation.host import SimulationHost

ESTIMATION_ITERS = 5  # benchmark_gpu's estimation_iters
BENCHMARK_ITERS = 100  # benchmark_gpu's benchmark_iters (25 ms // a call's time, at most)
NO_L2_SIZE = 256 * 2**20  # get_device_cache_size without an L2_cache_size
NOTE = (
    "torch.compile: Triton autotuning modelled as with a cold autotune cache (a first "
    "run): a kernel with several configs benchmarks each at its first launch with an "
    "L2-sized cache-flush buffer (and a copy of each buffer it writes in place); a warm "
    "cache (a later run on the same machine) skips it"
)


@dataclass(frozen=True)
class Kernel:
    """One Triton kernel of a graph, as its autotuning sees it."""

    heuristic: str  # "pointwise", "persistent_reduction" or "reduction"
    size_hints: tuple[tuple[str, int], ...]  # ("x", n), ("r0_", n): powers of two
    # a reduction's hint (DEFAULT, INNER, OUTER, OUTER_TINY; "unknown": symbolic sizes,
    # not modelled), a tiled pointwise kernel's (SQUARE), else ""
    hint: str
    inplace: tuple[int, ...]  # bytes of each buffer it writes in place
    source: tuple[str, ...]  # what stands for its source: its nodes' ops


def describe(plan: Plan, group: list[Node], lowered: dict[Node, Reduction]) -> list[Kernel]:
    """The kernels computing `group` (inductor_schedule.Schedule.kernels), its
    reductions lowered as `lowered` says (inductor_split.lower), in launch order: one,
    but for a scatter into a buffer its fill's kernel first (and for a split reduction
    its first kernel, `first_stage`, runs before its buffer is allocated)."""
    if op_name(group[0]) in SCATTERS:
        return _scatter(plan, group[0])
    return [_kernel(plan, group, lowered)]


def _scatter(plan: Plan, n: Node) -> list[Kernel]:
    """index_put (`self[indices] = values`, or `+=` with accumulate): a kernel over the
    values, tiled by rows of the index where each row is wider than one element, that
    writes into its target (a mutated argument); a target that no kernel made yet (a
    fused `full`, `zeros`: a gradient's) is filled by a kernel of its own first."""
    target, indices, values = n.args[0], n.args[1], n.args[2]
    out = value(n)
    kernels = []
    if isinstance(target, Node) and target not in plan.realized and out is not None:
        fill = Kernel("pointwise", (("x", _pow2(out.numel())),), "", (), (op_name(target),))
        kernels.append(fill)
    source = value(values) if isinstance(values, Node) else None
    listed = indices if isinstance(indices, (list, tuple)) else []
    index = [value(i) if isinstance(i, Node) else None for i in listed]
    if out is None or source is None or not index or index[0] is None:
        return kernels
    rows = index[0].numel()
    columns = source.numel() // max(rows, 1)
    written = (int(out.untyped_storage().nbytes()),)
    sizes: tuple[tuple[str, int], ...] = (("x", _pow2(source.numel())),)
    if columns > 1:
        sizes = (("y", _pow2(rows)), ("x", _pow2(columns)))
    return [*kernels, Kernel("pointwise", sizes, "", written, ("index_put",))]


def _kernel(plan: Plan, group: list[Node], lowered: dict[Node, Reduction]) -> Kernel:
    # a buffer of the kernel's own written in place is no argument it mutates
    own = set(group) | {o for o in plan.realized if o.args and o.args[0] in group}
    inplace = tuple(
        int(plan.reuse[m].meta["val"].untyped_storage().nbytes())
        for m in group
        if m in plan.inplace and plan.reuse[m] not in own
    )
    source = tuple(op_name(m) for m in group)
    reductions = [m for m in group if op_name(m) in REDUCTIONS]
    if not reductions:
        numel = iteration(group[0]) or 1
        out = value(group[0])
        if out is None or not _transposes(plan, group) or out.dim() < 2:
            return Kernel("pointwise", (("x", _pow2(numel)),), "", inplace, source)
        # tiled: y over the rows, x along the output's last dimension; one buffer in and
        # one out (in_ptr0, out_ptr0, ynumel, xnumel) is a square tile with one config
        columns = out.shape[-1]
        sizes = (("y", _pow2(numel // columns)), ("x", _pow2(columns)))
        reads = {b for m in group for b in plan.access.get(m, {})} - set(group)
        buffers = len(reads) + len([m for m in group if m not in plan.inplace])
        return Kernel("pointwise", sizes, "SQUARE" if buffers == 2 else "", inplace, source)
    r = lowered.get(reductions[0])
    if r is None:
        return Kernel("reduction", (), "unknown", inplace, source)
    if r.split > 1:  # the second of its two kernels (the first: first_stage)
        return reduction_kernel(r.outputs, r.split, r.second_hint, inplace, source)
    return reduction_kernel(r.outputs, r.row, r.hint, inplace, source)


def first_stage(group: list[Node], lowered: dict[Node, Reduction]) -> Kernel:
    """The first kernel of split reductions (fused where several): each output's row in
    `split` blocks, into the workspace (inductor_split.py)."""
    r = lowered[group[0]]
    source = ("split", *(op_name(m) for m in group))
    return reduction_kernel(r.outputs * r.split, r.block, r.hint, (), source)


def reduction_kernel(
    rows: int, row: int, hint: str, inplace: tuple[int, ...], source: tuple[str, ...]
) -> Kernel:
    """A reduction kernel: persistent (one block holds a whole row) up to rows of 1024
    elements for INNER, 64 for the others (choices.py `should_use_persistent_reduction`)."""
    persistent = _pow2(row) <= (1024 if hint == "INNER" else 64)
    heuristic = "persistent_reduction" if persistent else "reduction"
    sizes = (("x", _pow2(rows)), ("r0_", _pow2(row)))
    return Kernel(heuristic, sizes, hint, inplace, source)


def _transposes(plan: Plan, group: list[Node]) -> bool:
    """Whether a pointwise kernel reads a buffer across its rows (a transpose): Inductor
    tiles it in two dimensions (codegen/simd.py `select_tiling`)."""
    for m in group:
        for accesses in plan.access.get(m, {}).values():
            for access in accesses:
                strides = [s for _, s in access[0] if s] if access is not None else []
                if strides != sorted(strides, reverse=True):
                    return True
    return False


def _pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class _Config:
    """Stands in for triton.Config (absent from CPU builds): what torch's heuristics set
    and `triton_config_to_hashable` reads."""

    def __init__(self, kwargs: dict[str, Any], num_warps: int = 4, num_stages: int = 1, **_: Any):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages


def config_count(kernel: Kernel, gpu: Gpu) -> int:
    """How many distinct configs torch's heuristics give the kernel on this card, under
    Inductor's settings now (`triton.autotune_pointwise`, `max_autotune_pointwise`)."""
    from torch._inductor import config

    settings = (
        config.triton.autotune_pointwise,
        config.max_autotune,
        config.max_autotune_pointwise,
        config.triton.persistent_reductions,
    )
    return _config_count(kernel, gpu, settings)


@functools.cache
def _config_count(kernel: Kernel, gpu: Gpu, settings: tuple[bool, bool, bool, bool]) -> int:
    from torch._inductor.runtime import triton_heuristics as th
    from torch._inductor.runtime.hints import ReductionHint, TileHint

    device = device_properties(gpu)
    triton_meta: dict[str, Any] = {"device": device, "signature": {}}
    pointwise, max_autotune, max_pointwise, persistent_reductions = settings
    meta: dict[str, Any] = {
        "autotune_pointwise": pointwise,
        "max_autotune": max_autotune,
        "max_autotune_pointwise": max_pointwise,
    }
    sizes = dict(kernel.size_hints)
    hint = getattr(ReductionHint, kernel.hint, ReductionHint.DEFAULT)
    with _stub_configs(th):
        if kernel.heuristic == "pointwise":
            tile = TileHint.SQUARE if kernel.hint == "SQUARE" else TileHint.DEFAULT
            configs = th.pointwise(
                sizes, triton_meta, tile, inductor_meta=meta, return_configs=True
            )
        elif kernel.heuristic == "persistent_reduction" and persistent_reductions:
            configs = th._persistent_reduction_configs(sizes, hint, meta, triton_meta)
        else:
            configs = th.reduction(
                sizes, hint, triton_meta, inductor_meta=meta, return_configs=True
            )
        return len(th.unique_configs(configs))


@contextlib.contextmanager
def _stub_configs(module: Any) -> Iterator[None]:
    saved = module.Config, module.InductorConfig
    module.Config = module.InductorConfig = _Config
    try:
        yield
    finally:
        module.Config, module.InductorConfig = saved


# per simulation: the kernels already benchmarked (Inductor's autotune cache, by source)
_tuned: weakref.WeakKeyDictionary[Any, set[Kernel]] = weakref.WeakKeyDictionary()


def first_launch(
    sim: SimulationHost, kernel: Kernel, optimize_mem: bool, stack: list[dict[str, Any]]
) -> None:
    """The allocations of the kernel's first launch: its configs benchmarked, if several."""
    tuned = _tuned.setdefault(sim, set())
    if kernel in tuned or kernel.hint == "unknown":
        return
    tuned.add(kernel)
    configs = config_count(kernel, sim.gpu)
    if configs < 2:
        return
    sim.note(NOTE)
    l2 = sim.gpu.l2_cache or NO_L2_SIZE
    allocator = sim.allocator
    on = sim.frames.enabled  # torch's frame above the kernel's, as PyTorch records it
    flush_stack = [_frame("benchmark_gpu"), *stack] if on else []
    clone_stack = [_frame("clone_preserve_strides"), *stack] if on else []
    for _ in range(configs):
        clones = list(kernel.inplace)
        if optimize_mem:  # copy_args_to_cpu_if_needed: what exceeds the budget goes to host
            budget = allocator.peak_allocated - allocator.allocated
            clones = []
            for size in kernel.inplace:
                if size <= budget:
                    budget -= size
                    clones.append(size)
        _call(sim, clones, clone_stack)  # the call before the buffer
        flush = sim._malloc(l2 // 4 * 4, flush_stack)
        for _ in range(ESTIMATION_ITERS + BENCHMARK_ITERS):
            _call(sim, clones, clone_stack)
        allocator.free(flush, flush_stack)


def _call(sim: SimulationHost, clones: list[int], stack: list[dict[str, Any]]) -> None:
    """One benchmarked call: the in-place buffers cloned, freed when the call returns."""
    addresses = [sim._malloc(size, stack) for size in clones]
    for address in addresses:
        sim.allocator.free(address, stack)


def made_by_autotuning(entry: dict[str, Any]) -> bool:
    """Whether a trace entry of a simulation is autotuning's (a flush buffer, a clone)."""
    frames = entry.get("frames") or []
    return bool(frames) and frames[0]["name"] in ("benchmark_gpu", "clone_preserve_strides")


@functools.cache
def _frame(name: str) -> dict[str, Any]:
    """torch's frame that makes the allocation, for the trace's stacks."""
    from torch._inductor import compile_fx
    from torch._inductor.runtime import benchmarking

    fn: Any = (
        benchmarking.InductorBenchmarker.benchmark_gpu
        if name == "benchmark_gpu"
        else compile_fx.clone_preserve_strides
    )
    fn = inspect.unwrap(fn)
    return {
        "filename": inspect.getsourcefile(fn) or "",
        "line": fn.__code__.co_firstlineno,
        "name": name,
    }

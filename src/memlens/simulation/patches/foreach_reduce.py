"""What the foreach reductions allocate on a GPU: `_foreach_norm` (what
`torch.nn.utils.clip_grad_norm_` calls on every step), `_foreach_powsum`, `_foreach_max`.

Their CUDA kernels (aten/src/ATen/native/cuda/ForeachReduceOp.cu,
`foreach_tensor_norm_cuda_internal` and `foreach_tensor_max_cuda`, read, not copied) take,
on the fast route:

1. `output_per_tensor`: a zeroed buffer of one partial result per tensor and per chunk of
   the largest tensor, ntensors x ceil(max numel / 65536) (`kChunkSize`,
   MultiTensorApply.cuh), for the norms in the "opmath" type of their output (the `dtype`
   argument, else the input's; float for half, bfloat16 and float), for the maxima in the
   input's own type; none when every tensor is empty;
2. one 0-dim result per tensor, in list order;
3. after the kernels, a zeroed 0-dim result for each empty tensor: the results of step 2
   go to the non-empty tensors in order, and the ones left over are freed on return,
   before `output_per_tensor`.

`multi_tensor_apply` passes its tensor addresses as a kernel argument (host memory only).
The fast route needs every tensor on the first one's device, strided, non-overlapping and
dense, of the first one's type, and no integer or complex tensor (norms); `ord` 0, 1, 2 or
inf for the norm, 1 or 2 for powsum (the kernels of torch 2.14's CUDA build; a CPU build
carries none). Otherwise `_foreach_norm` takes the slow route, one `linalg_vector_norm`
per tensor (its output, then the reduction's staging buffer: reduce_kernel.py), and
`_foreach_max` one `max()` per tensor. `_foreach_powsum`'s slow route
(`linalg__powsum` per tensor) is not modelled: its outputs only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false

from memlens.simulation.patches.reduce_kernel import NORM, VALUES_ALL, Reduction, run

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost

_aten = torch.ops.aten
_CHUNK = 65536  # kChunkSize: the elements one block of multi_tensor_apply covers
_NORM_FAST = (0.0, 1.0, 2.0, math.inf)
_POWSUM_FAST = (1.0, 2.0)
Kernel = Callable[["SimulationHost", tuple[Any, ...], Any], None]


def _is_cuda(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def _fast_route(tensors: Sequence[torch.Tensor]) -> bool:
    """`can_use_fast_route(tensors)` (ForeachUtils.h) for one list."""
    first = tensors[0]
    return all(
        t.device == first.device
        and t.layout == torch.strided
        and is_non_overlapping_and_dense_or_false(t)
        and t.dtype == first.dtype
        for t in tensors
    )


def _int_or_complex(tensors: Sequence[torch.Tensor]) -> bool:
    return any(not t.dtype.is_floating_point for t in tensors)  # bool, integers, complex


def _opmath(dtype: torch.dtype) -> torch.dtype:
    # toOpMathType: float for half and bfloat16, the type itself otherwise
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _multi_tensor(
    sim: SimulationHost,
    tensors: Sequence[torch.Tensor],
    partial: torch.dtype,
    results: Sequence[torch.Tensor],
) -> None:
    """The fast route: the partials, every tensor's result, the empty tensors' zeros."""
    stack = sim._stack()
    chunks = max(-(-t.numel() // _CHUNK) for t in tensors)
    partials = sim._malloc(len(tensors) * chunks * partial.itemsize) if chunks else None
    filled = [r for t, r in zip(tensors, results, strict=True) if t.numel()]
    empty = [r for t, r in zip(tensors, results, strict=True) if not t.numel()]
    sim._track_outputs(filled)
    # the results past the non-empty tensors' count, made with them and never returned
    spare = [sim._malloc(results[0].element_size()) for _ in empty]
    sim._track_outputs(empty)
    for block in spare:
        sim.allocator.free(block, stack)
    if partials is not None:
        sim.allocator.free(partials, stack)


def _slow(
    sim: SimulationHost,
    spec: Reduction,
    tensors: Sequence[torch.Tensor],
    rest: tuple[Any, ...],
    results: Sequence[torch.Tensor],
) -> None:
    """One reduction per tensor, each on its own device: its result, then its buffers."""
    for t, r in zip(tensors, results, strict=True):
        if _is_cuda(t):
            run(sim, spec, (t, *rest), r)
        else:
            sim._track_outputs(r)


def _ord(args: tuple[Any, ...]) -> float:
    return float(args[1]) if len(args) > 1 else 2.0


def _norms(fast: tuple[float, ...], slow: Reduction | None) -> Kernel:
    """A norm-like foreach reduction: the multi-tensor kernel for the `fast` ords, else
    the `slow` reduction per tensor (None: not modelled, the outputs only)."""

    def kernel(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
        tensors, p = list(args[0]), _ord(args)
        if sim.in_compiled_graph or not tensors:
            sim._track_outputs(out)
        elif _fast_route(tensors) and not _int_or_complex(tensors) and p in fast:
            _multi_tensor(sim, tensors, _opmath(out[0].dtype), out)
        elif slow is None:
            sim._track_outputs(out)
        else:
            dtype = args[2] if len(args) > 2 else None
            _slow(sim, slow, tensors, (p, None, False, dtype), out)

    return kernel


def foreach_max(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
    tensors = list(args[0])
    if sim.in_compiled_graph or not tensors:
        sim._track_outputs(out)
    elif _fast_route(tensors):  # any type: the partials in the input's own
        _multi_tensor(sim, tensors, tensors[0].dtype, out)
    else:
        _slow(sim, VALUES_ALL, tensors, (), out)


KERNELS: dict[Any, Kernel] = {
    _aten._foreach_norm.Scalar: _norms(_NORM_FAST, NORM),
    _aten._foreach_powsum.Scalar: _norms(_POWSUM_FAST, None),
    _aten._foreach_max.default: foreach_max,
}

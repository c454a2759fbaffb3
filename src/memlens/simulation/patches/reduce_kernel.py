"""Which reductions run ATen's CUDA reduction kernel, and with what accumulator.

On a GPU the reductions below run `gpu_reduce_kernel` (aten/src/ATen/native/cuda/
Reduce.cuh; the kernels in Reduce*Kernel.cu and ReduceOps.cpp/TensorCompare.cpp, read,
not copied), which may take a staging buffer and semaphores from the caching allocator
(reduce_config.py says when and how large). A CPU build has no such kernel, so a
simulation sees neither. They matter: an RMSNorm's weight gradient (`(grad * x).sum((0,
1))`, every layer's backward) on a (4, 384, 1024) fp32 activation takes a 12 MiB buffer on
an H200 and none at sequence length 128, which is what the GPU recordings of
tests/data/gpu show (docs/simulation.md, "A third-party script on an H200").

The buffer's element is the kernel's accumulator (`arg_t`), per operator:
- sum, nansum, mean, prod, linalg_vector_norm: the "opmath" type, float for half,
  bfloat16 and float, else the scalar type itself;
- max/min over everything, amax/amin: the scalar type (MaxNanFunctor on scalar_t);
- aminmax: a pair of the scalar type (MinMaxOps), 2 x its size;
- max/min along a dim (values and indices), argmax/argmin: a pair of the value and an
  int64 index, 16 bytes;
- var/std/var_mean/std_mean: Welford's (mean, m2, int32 n, nf) in the accumulate type,
  16 bytes (32 for double), read 2 values at a time (vt0 = 2);
- any/all: the input's own type (CUDA casts while it reads).
Sum and mean on 16-bit types read 8 inputs at a time, the rest 4 (prod runs the jitted
kernel, vt0 = 4).

What the kernel reads can be a temporary of its own, also taken after the output:
`make_reduction` casts the input to the result's type first (a float64 sum of float32
values; half/bfloat16 into float is done while reading, without a copy); `max()`/`min()`
and `aminmax()` without a dim read `self.contiguous()`; `argmax()`/`argmin()` without a
dim read `self.reshape(-1)`.

`logsumexp`, a composite of these kernels inside one op on CUDA: logsumexp_kernel.py.
Not modelled: complex inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false, make_contiguous_strides_for

from memlens.simulation.patches.reduce_config import Card, reduce_buffers

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost

_aten = torch.ops.aten
_LOW_PRECISION = (torch.float16, torch.bfloat16)


def _opmath(dtype: torch.dtype) -> int:
    # at::opmath_type / acc_type on CUDA: float for half, bfloat16 and float
    return 4 if dtype in (*_LOW_PRECISION, torch.float32) else dtype.itemsize


def _own(dtype: torch.dtype) -> int:
    return dtype.itemsize


def _value_and_index(dtype: torch.dtype) -> int:
    # thrust::pair<scalar or float, int64_t>: the index aligns the pair to 8 bytes
    return 16


def _min_and_max(dtype: torch.dtype) -> int:
    # thrust::pair<scalar_t, scalar_t>: MinMaxOps keeps both in the scalar type
    return 2 * dtype.itemsize


def _welford(dtype: torch.dtype) -> int:
    # WelfordData<acc_scalar_t, int32_t>: mean, m2, n, nf
    return 32 if dtype == torch.float64 else 16


def _sum_vector(dtype: torch.dtype) -> int:
    # sum_functor / mean_kernel_impl: 16-bit types read 8 inputs at a time
    return 8 if dtype.itemsize == 2 else 4


def _four(dtype: torch.dtype) -> int:
    return 4


def _two(dtype: torch.dtype) -> int:
    return 2


def _listed(args: tuple[Any, ...]) -> Sequence[int] | None:
    """A dim list (or one dim) in args[1]; None or [] reduce everything."""
    dims = args[1] if len(args) > 1 else None
    return [dims] if isinstance(dims, int) else dims


def _one(args: tuple[Any, ...]) -> Sequence[int] | None:
    return [args[1]]


def _optional_one(args: tuple[Any, ...]) -> Sequence[int] | None:
    return None if args[1] is None else [args[1]]


def _everything(args: tuple[Any, ...]) -> Sequence[int] | None:
    return None


# How the kernel's input comes from `self`
AS_IS = "as_is"  # read in place, in its own type
CAST = "cast"  # make_reduction: converted to the result's type unless 16-bit into float
CONTIGUOUS = "contiguous"  # self.contiguous()
FLATTENED = "flattened"  # self.reshape(-1) when no dim is given
WHOLE_CONTIGUOUS = "whole_contiguous"  # self.contiguous() when no dim is given


@dataclass(frozen=True)
class Reduction:
    accumulator: Callable[[torch.dtype], int]  # bytes of arg_t, from the kernel's scalar type
    vector: Callable[[torch.dtype], int]  # input_vec_size
    dims: Callable[[tuple[Any, ...]], Sequence[int] | None]
    reads: str = AS_IS
    floating_only: bool = False


def _flattens_as_view(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether reshape(-1) is a view: each dimension (size 1 aside) steps over the next."""
    kept = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    return all(s == s_next * n_next for (_, s), (n_next, s_next) in zip(kept, kept[1:]))


def _kernel_input(
    reads: str, x: torch.Tensor, result_dtype: torch.dtype, dims: Sequence[int] | None
) -> tuple[torch.dtype, tuple[int, ...], tuple[int, ...], int, bool]:
    """(scalar type, shape, strides, offset in bytes, whether it is a fresh copy)."""
    shape, strides = tuple(x.shape), tuple(x.stride())
    offset = int(x.storage_offset()) * x.dtype.itemsize
    contiguous = tuple(make_contiguous_strides_for(shape))
    if reads == CAST:
        into_float = x.dtype in _LOW_PRECISION and result_dtype == torch.float32
        if into_float or x.dtype == result_dtype:
            return x.dtype, shape, strides, offset, False
        # .to(dtype) keeps the strides of a dense tensor, else makes it contiguous
        kept = strides if is_non_overlapping_and_dense_or_false(x) else contiguous
        return result_dtype, shape, kept, 0, True
    whole = reads == WHOLE_CONTIGUOUS and not dims
    if (reads == CONTIGUOUS or whole) and not x.is_contiguous():
        return x.dtype, shape, contiguous, 0, True
    if reads == FLATTENED and not dims and not _flattens_as_view(shape, strides):
        return x.dtype, (x.numel(),), (1,), 0, True  # reshape copies
    return x.dtype, shape, strides, offset, False


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


def run(sim: SimulationHost, spec: Reduction, args: tuple[Any, ...], out: Any) -> None:
    sim._track_outputs(out)
    x = args[0]
    if sim.in_compiled_graph or x.dim() == 0 or x.is_complex():
        return  # Inductor writes its own reductions; a scalar reduces nothing
    if spec.floating_only and not x.dtype.is_floating_point:
        return
    dims = spec.dims(args)
    scalar, shape, strides, offset, copied = _kernel_input(spec.reads, x, _first(out).dtype, dims)
    reduced = range(len(shape)) if not dims or len(shape) != x.dim() else dims
    copy = sim._malloc(x.numel() * scalar.itemsize) if copied and x.numel() else None
    stage(sim, spec, scalar, shape, strides, reduced, offset)
    if copy is not None:
        sim.allocator.free(copy, sim._stack())


def stage(
    sim: SimulationHost,
    spec: Reduction,
    scalar: torch.dtype,
    shape: Sequence[int],
    strides: Sequence[int],
    reduced: Sequence[int],
    offset: int = 0,
) -> None:
    """Take and release the kernel's staging buffer and semaphores, if it splits the
    reduction of a `scalar` tensor of `shape`/`strides` (elements) over `reduced`."""
    gpu = sim.gpu
    buffers = reduce_buffers(
        shape,
        strides,
        scalar.itemsize,
        reduced,
        spec.accumulator(scalar),
        Card(gpu.multiprocessors, gpu.max_threads_per_multiprocessor),
        offset_bytes=offset,
        input_vec_size=spec.vector(scalar),
    )
    if buffers.staging:
        stack = sim._stack()
        staging = sim._malloc(buffers.staging)
        semaphores = sim._malloc(buffers.semaphores)
        sim.allocator.free(semaphores, stack)
        sim.allocator.free(staging, stack)


SUM = Reduction(_opmath, _sum_vector, _listed, CAST)
_PROD = Reduction(_opmath, _four, _listed, CAST)
NORM = Reduction(_opmath, _four, lambda args: _listed(args[1:]), CAST)  # (self, ord, dim)
VALUES_ALL = Reduction(_own, _four, _everything, CONTIGUOUS)
VALUES = Reduction(_own, _four, _listed)
_VALUES_INDICES = Reduction(_value_and_index, _four, _one)
_ARG = Reduction(_value_and_index, _four, _listed, FLATTENED)
_WELFORD = Reduction(_welford, _two, _listed, floating_only=True)
_LOGIC = Reduction(_own, _four, _listed)
# aminmax(self, *, dim, keepdim): the tracker appends the keyword-only arguments
_AMINMAX = Reduction(_min_and_max, _four, _optional_one, WHOLE_CONTIGUOUS)

TABLE: dict[Any, Reduction] = {
    _aten.sum.dim_IntList: SUM,
    _aten.sum.default: SUM,
    _aten.nansum.default: Reduction(_opmath, _four, _listed, CAST),
    _aten.mean.dim: SUM,
    _aten.mean.default: SUM,
    _aten.prod.dim_int: _PROD,
    _aten.prod.default: _PROD,
    _aten.linalg_vector_norm.default: NORM,
    _aten.max.default: VALUES_ALL,
    _aten.min.default: VALUES_ALL,
    _aten.amax.default: VALUES,
    _aten.amin.default: VALUES,
    _aten.aminmax.default: _AMINMAX,
    _aten.max.dim: _VALUES_INDICES,
    _aten.min.dim: _VALUES_INDICES,
    _aten.argmax.default: _ARG,
    _aten.argmin.default: _ARG,
    _aten.var.correction: _WELFORD,
    _aten.std.correction: _WELFORD,
    _aten.var_mean.correction: _WELFORD,
    _aten.std_mean.correction: _WELFORD,
    _aten.any.default: _LOGIC,
    _aten.any.dim: _LOGIC,
    _aten.any.dims: _LOGIC,
    _aten.all.default: _LOGIC,
    _aten.all.dim: _LOGIC,
    _aten.all.dims: _LOGIC,
}


def _hook(spec: Reduction) -> Callable[[SimulationHost, tuple[Any, ...], Any], None]:
    def kernel(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
        run(sim, spec, args, out)

    return kernel


# The keyword-only arguments a kernel reads, in order: the tracker appends their values
# (None when not given) to the positional arguments it passes.
KEYWORD_ONLY: dict[Any, tuple[str, ...]] = {_aten.aminmax.default: ("dim", "keepdim")}

KERNELS: dict[Any, Callable[[SimulationHost, tuple[Any, ...], Any], None]] = {
    func: _hook(spec) for func, spec in TABLE.items()
}

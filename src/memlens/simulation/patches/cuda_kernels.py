"""Ops whose CUDA kernel the CPU build lacks, run as a GPU runs them.

`docs/cuda-kernels.md` (written by `scripts/gen_cuda_kernels.py` from torch's own
registrations) lists the ops whose dispatch on a CUDA build differs from the CPU build's.
The one that changes what autograd records is an op that is CompositeImplicitAutograd on
CPU but has a CUDA kernel: `_fused_rms_norm`, which `torch.nn.RMSNorm` / `F.rms_norm`
call on every device but MPS. On a CPU build the composite decomposes above autograd, so
autograd saves the upcast input, the mean of squares, the rsqrt and the product, and the
final `type_as` copies to the C++ device, which reads `cpu` on fake CUDA tensors (see
fake_cuda): the output came back as a CPU fake. On a GPU, autograd records one
`_fused_rms_norm` node saving the input, the weight and `rstd`, and the kernel
(layer_norm_kernel.cu `_fused_rms_norm_cuda`, read, not copied) allocates the output
and `rstd` (M values of the accumulate type) only.

To get the GPU's autograd routing, `install` registers a CPU kernel for such ops: a
backend kernel makes the dispatcher pick the op's Autograd kernel (the derivatives.yaml
formula) over the composite, as on a CUDA build. The op then reaches the dispatch modes
whole, where the tracker asks `MODELS` for what the kernel allocates. A real host tensor
reaching the CPU kernel gets the composite's values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost
    from memlens.simulation.patches.fake_cuda import Patches

_aten = torch.ops.aten
# The CompositeImplicitAutograd-on-CPU ops with a CUDA kernel (docs/cuda-kernels.md,
# "composite on CPU"): each gets a CPU kernel while simulating.
COMPOSITE_ON_CPU = ("_fused_rms_norm",)


def _accumulate_dtype(dtype: torch.dtype) -> torch.dtype:
    # at::toAccumulateType(t, is_cuda=true): float for half, bfloat16 and float
    return torch.float64 if dtype == torch.float64 else torch.float32


def _contiguous(sim: SimulationHost, t: torch.Tensor | None) -> torch.Tensor | None:
    """`expect_contiguous()`: the tensor itself, or a copy the kernel frees at return."""
    if t is None or t.is_contiguous():
        return t
    copy = t.contiguous()
    sim._track_outputs(copy)
    return copy


def _empty(shape: tuple[int, ...], dtype: torch.dtype, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=like.device)


def fused_rms_norm(sim: SimulationHost, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """`_fused_rms_norm_cuda`: Y like the (contiguous) input, then rstd (M,) in the
    accumulate type, viewed as the input's leading dims followed by ones."""
    input, normalized_shape = args[0], list(args[1])
    weight = args[2] if len(args) > 2 else kwargs.get("weight")
    x = _contiguous(sim, input)
    gamma = _contiguous(sim, weight)
    assert x is not None
    y = _empty(tuple(x.shape), x.dtype, x)
    sim._track_outputs(y)
    axis = input.dim() - len(normalized_shape)
    rows = math.prod(input.shape[:axis])
    rstd = _empty((rows,), _accumulate_dtype(input.dtype), x)
    sim._track_outputs(rstd)
    del gamma  # the copies die when the kernel returns
    return y, rstd.view(*input.shape[:axis], *([1] * len(normalized_shape)))


def fused_rms_norm_backward(
    sim: SimulationHost, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """`_fused_rms_norm_backward_cuda`: dX like the contiguous input, dgamma like the
    weight, then grad_out made contiguous inside the kernel's launcher. The gamma
    reduction's per-block partial sums (LaunchGammaBetaBackwardCUDAKernel) are not
    modelled."""
    grad_out, input, _shape, _rstd, weight, mask = args[:6]
    x = _contiguous(sim, input)
    gamma = _contiguous(sim, weight)
    assert x is not None
    dx = _empty(tuple(x.shape), x.dtype, x) if mask[0] else None
    sim._track_outputs(dx)
    dgamma = (
        _empty(tuple(gamma.shape), gamma.dtype, gamma) if mask[1] and gamma is not None else None
    )
    sim._track_outputs(dgamma)
    dy = _contiguous(sim, grad_out)
    del dy, gamma
    return dx, dgamma


MODELS: dict[Any, Callable[[SimulationHost, tuple[Any, ...], dict[str, Any]], Any]] = {
    _aten._fused_rms_norm.default: fused_rms_norm,
    _aten._fused_rms_norm_backward.default: fused_rms_norm_backward,
}


def _composite_values(name: str) -> Callable[..., Any]:
    op = getattr(_aten, name).default

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.decompose(*args, **kwargs)

    return kernel


def install(patches: Patches, sim: SimulationHost) -> None:
    """CPU kernels for the composite-on-CPU ops, removed when the simulation ends."""
    library = torch.library.Library("aten", "IMPL")
    for name in COMPOSITE_ON_CPU:
        library.impl(name, _composite_values(name), "CPU")
    patches.on_restore(library._destroy)

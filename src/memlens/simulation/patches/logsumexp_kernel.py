"""What `logsumexp` allocates on a GPU, inside the one op the simulation sees.

`logsumexp` is CompositeExplicitAutograd: autograd records one node, and on CUDA its
kernel (`logsumexp_out_impl` in aten/src/ATen/native/ReduceOps.cpp, read, not copied) runs
other ops that allocate, which a fake tensor's single output does not show:

1. `maxes = amax(self, dims, keepdim=True)`: the maxima, then amax's staging buffer;
2. `maxes_squeezed.masked_fill_(maxes_squeezed.abs() == INFINITY, 0)`: an `abs` of the
   maxima and a bool mask, freed at the end of the statement (the mask first);
3. `sum_out(result, (self - maxes).exp_(), dims, keepdim)`: a temporary as large as
   `self` (the difference, exponentiated in place), then the result, then sum's staging
   buffer; the temporary is freed at the end of the statement;
4. `result.log_().add_(maxes_squeezed)` in place; the maxima are freed on return.

An integer input is first copied into the default floating type (`self.to(...)`), freed
after all of it. The difference takes `self`'s layout when `self` is dense (TensorIterator
follows its strides), else a contiguous one. On a (4096, 32000) fp32 logit matrix that is
500 MiB the op holds beyond its output: the peak of a z-loss (`logits.logsumexp(-1)`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false, make_contiguous_strides_for

from memlens.simulation.patches.reduce_kernel import SUM, VALUES, stage

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost

_aten = torch.ops.aten


def logsumexp(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
    x = args[0]
    if sim.in_compiled_graph or x.numel() == 0 or x.is_complex():
        sim._track_outputs(out)  # Inductor writes its own; an empty input: exp and sum
        return
    dims = args[1] if len(args) > 1 else []
    reduced = sorted({d % x.dim() for d in dims} if dims else range(x.dim()))
    shape = tuple(x.shape)
    scalar = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    size = scalar.itemsize
    # the layout of `self - maxes` (and of the integer input's copy): self's when dense
    dense = is_non_overlapping_and_dense_or_false(x)
    layout = tuple(x.stride()) if dense else tuple(make_contiguous_strides_for(shape))
    stack = sim._stack()
    copy = sim._malloc(x.numel() * size) if scalar != x.dtype else None
    read, offset = (layout, 0) if copy else (tuple(x.stride()), int(x.storage_offset()) * size)
    maxes = math.prod(1 if d in reduced else n for d, n in enumerate(shape))
    held = sim._malloc(maxes * size)
    stage(sim, VALUES, scalar, shape, read, reduced, offset)
    absolute = sim._malloc(maxes * size)
    mask = sim._malloc(maxes)  # bool
    sim.allocator.free(mask, stack)
    sim.allocator.free(absolute, stack)
    difference = sim._malloc(x.numel() * size)
    sim._track_outputs(out)
    stage(sim, SUM, scalar, shape, layout, reduced)
    sim.allocator.free(difference, stack)
    sim.allocator.free(held, stack)
    if copy is not None:
        sim.allocator.free(copy, stack)


KERNELS: dict[Any, Callable[[SimulationHost, tuple[Any, ...], Any], None]] = {
    _aten.logsumexp.default: logsumexp,
}

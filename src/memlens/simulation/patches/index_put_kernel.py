"""The temporaries of ATen's sort-based `index_put_` with accumulation (a GPU's path).

On a GPU, `index_put_(indices, values, accumulate=True)` runs `index_put_with_sort_kernel`
(aten/src/ATen/native/cuda/Indexing.cu, read, not copied); a CPU build accumulates in
place with no temporaries, so a simulation saw none. It is what autograd runs for the
backward of advanced indexing (`weight[ids]`, an embedding written as indexing: the cs336
script's), through `_index_put_impl_(zeros, indices, grad, accumulate=True, unsafe=True)`.
With n indices (after broadcasting), each a block of n int64 values:
- `makeLinearIndex`: for each index tensor, `index.remainder(size)` then `* stride` (the
  remainder freed at once); a second index is added into the first and freed;
- the values made contiguous in the indexed shape, when they are not already;
- `sorted_indices`, `orig_indices` (`empty_like`), `range` (`arange(n)`);
- cub's radix sort of (linear index, position) pairs takes its temporary storage from the
  caching allocator: 1 byte when the n pairs fit one tile (256 threads x 9 items for 8-byte
  keys and values: n <= 2,304), freed when the sort returns;
- at return: range, orig_indices, sorted_indices, the values' copy, the linear index.
The H200 recordings of the cs336 script (tests/data/gpu/2026-11-28-h200) show exactly that
at every context from 128 to 576 (512 to 2,304 indices).

Modelled only where the sizes are known: int64 index tensors, adjacent, into a contiguous
tensor, without the range check (`unsafe`, autograd's call). A Python-level `index_put_`
checks the range first (`aminmax` and two `_assert_async`), a larger sort uses cub's
multi-pass temporary storage, and boolean masks go through `nonzero`: those runs get a note
and no temporaries.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost

_aten = torch.ops.aten
INDEX_BYTES = 8  # int64
# cub's single-tile radix sort (SingleTilePolicy 256 threads x 19 items at 4 bytes, scaled
# to 9 items for 8-byte keys and values): up to this many pairs its storage is 1 byte
SINGLE_TILE_PAIRS = 256 * 9
SINGLE_TILE_STORAGE = 1
NOT_MODELLED = (
    "index_put_ with accumulate=True: the sort's temporaries are modelled for autograd's "
    "unchecked call with int64 indices and up to 2,304 of them; this one has none"
)


def _indexed_dims(self: torch.Tensor, indices: list[Any]) -> range | None:
    """The dimensions the index tensors index, or None where the kernel's temporaries
    are not modelled (other index types, a non-contiguous target, indexed dimensions
    apart: the kernel transposes and copies)."""
    defined = [i for i, t in enumerate(indices) if t is not None]
    if not defined or not self.is_contiguous():
        return None
    if defined != list(range(defined[0], defined[-1] + 1)):
        return None
    if any(indices[i].dtype != torch.int64 for i in defined):
        return None
    return range(defined[0], defined[-1] + 1)


def index_put_sorted(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
    """index_put_ / _index_put_impl_ (self, indices, values, accumulate[, unsafe])."""
    sim._track_outputs(out)
    self, indices, values = args[0], list(args[1]), args[2]
    accumulate = len(args) > 3 and bool(args[3])
    unsafe = len(args) > 4 and bool(args[4])
    if not accumulate or sim.in_compiled_graph:
        return  # without accumulation: a TensorIterator kernel, no temporaries
    if torch._C._current_autograd_node() is not None:
        unsafe = True  # index_backward's _index_put_impl_(..., unsafe=True) on a GPU
    shape = torch.broadcast_shapes(*(t.shape for t in indices if t is not None))
    n = math.prod(shape)
    dims = _indexed_dims(self, indices) if unsafe else None
    if dims is None or n > SINGLE_TILE_PAIRS:
        sim.note(NOT_MODELLED)
        return
    stack = sim._stack()
    block = n * INDEX_BYTES
    linear = 0
    for k in range(len(dims)):
        wrapped = sim._malloc(block, stack)  # index.remainder(size)
        scaled = sim._malloc(block, stack)  # ... * stride
        sim.allocator.free(wrapped, stack)
        if k == 0:
            linear = scaled
        else:
            sim.allocator.free(scaled, stack)  # added into the first, then dropped
    before, after = self.shape[: dims.start], self.shape[dims.stop :]
    if n == 0 or math.prod(after) == 0:
        sim.allocator.free(linear, stack)
        return
    expanded = values.expand((*before, *shape, *after))
    copy = 0 if expanded.is_contiguous() else sim._malloc(expanded.numel() * values.itemsize, stack)
    sorted_indices = sim._malloc(block, stack)
    orig_indices = sim._malloc(block, stack)
    positions = sim._malloc(block, stack)  # arange(n)
    sim.allocator.free(sim._malloc(SINGLE_TILE_STORAGE, stack), stack)
    for address in (positions, orig_indices, sorted_indices, copy, linear):
        if address:
            sim.allocator.free(address, stack)


KERNELS: dict[Any, Callable[[SimulationHost, tuple[Any, ...], Any], None]] = {
    _aten.index_put_.default: index_put_sorted,
    _aten._index_put_impl_.default: index_put_sorted,
}

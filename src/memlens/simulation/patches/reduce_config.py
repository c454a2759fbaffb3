"""The launch arithmetic of ATen's CUDA reduction kernel: its staging buffer and semaphores.

`gpu_reduce_kernel` (aten/src/ATen/native/cuda/Reduce.cuh, read, not copied; torch 2.13
ships it under torch/include) sizes its launch in `setReduceConfig`. It may split each
output's inputs across several thread blocks ("global reduce"); the blocks then meet in a
staging buffer and a semaphore array, both taken from the caching allocator after the
output and freed once the kernel is queued (semaphores first, then the buffer).

The configuration follows the TensorIterator's view of the reduction: size-1 dimensions
dropped, reduced dimensions first, the rest ordered by the input's strides, adjacent
dimensions coalesced. Then, with `num_outputs` outputs of `inputs` values each:
- reducing along the input's fastest dimension, a block's x lanes share one output (and
  read `input_vec_size` inputs at a time when the dimension has at least 128 values and
  is the only one reduced); otherwise its x lanes take different outputs, 4 at a time
  when the addresses allow ("vectorize along output");
- block sizes are powers of two, at most 512 threads;
- when each thread would still reduce at least 256 values and the grid is no larger than
  the card can run at once (multiprocessors x max threads per multiprocessor / threads),
  the inputs are split over `ctas_per_output` blocks, and the buffer holds
  sizeof(accumulator) x outputs x blocks (x the block's width x the output vector when
  the x lanes are not reducing); one 4-byte semaphore per block column.

Which operator runs which accumulator and vector width: reduce_kernel.py. Not modelled:
complex double (256-thread blocks), the 32-bit-indexing split of tensors over 2**31
elements, and ROCm's heuristics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_NUM_THREADS = 512
MIN_VALUES_PER_THREAD = 16
MAX_VALUES_PER_THREAD = 256


@dataclass(frozen=True)
class Card:
    """What the configuration reads of the device."""

    multiprocessors: int
    max_threads_per_multiprocessor: int
    warp_size: int = 32


@dataclass(frozen=True)
class Buffers:
    """The kernel's own allocations, in bytes (0: none)."""

    staging: int
    semaphores: int


NONE = Buffers(0, 0)


def _div_up(a: int, b: int) -> int:
    return -(-a // b)


def _last_pow2(n: int) -> int:
    """The largest power of two <= n, at least 1 (Reduce.cuh's last_pow2)."""
    return max(1, 1 << (n.bit_length() - 1)) if n > 0 else 1


def _iterator_dims(
    shape: Sequence[int], strides: Sequence[int], itemsize: int, reduced: set[int]
) -> list[tuple[int, int, int]]:
    """(size, input stride, output stride) in bytes per dimension, as TensorIterator
    leaves them for a reduction into a fresh contiguous output: size-1 dimensions gone,
    fastest dimension first (reduced ones ahead of the rest), adjacent ones coalesced."""
    out_strides: dict[int, int] = {}
    step = itemsize
    for d in reversed(range(len(shape))):
        if d not in reduced:
            out_strides[d] = step
            step *= shape[d]
    dims = [
        (shape[d], strides[d] * itemsize, out_strides.get(d, 0))
        for d in reversed(range(len(shape)))
        if shape[d] != 1
    ]

    def should_swap(a: tuple[int, int, int], b: tuple[int, int, int]) -> int:
        # reorder_dimensions' comparator, output operand first, then the input
        if (a[2] == 0) != (b[2] == 0):
            return 1 if b[2] == 0 else -1
        for sa, sb in ((a[2], b[2]), (a[1], b[1])):
            if sa == 0 or sb == 0:
                continue
            if sa != sb:
                return -1 if sa < sb else 1
            if a[0] > b[0]:
                return 1
        return 0

    for i in range(1, len(dims)):  # insertion sort that leaves ambiguous pairs alone
        j = i
        for k in range(i - 1, -1, -1):
            order = should_swap(dims[k], dims[j])
            if order > 0:
                dims[k], dims[j] = dims[j], dims[k]
                j = k
            elif order < 0:
                break
    merged: list[tuple[int, int, int]] = []
    for size, s_in, s_out in dims:
        if merged:
            p_size, p_in, p_out = merged[-1]
            if p_in * p_size == s_in and p_out * p_size == s_out:
                merged[-1] = (p_size * size, p_in, p_out)
                continue
        merged.append((size, s_in, s_out))
    return merged


def _output_vec_size(
    dims: list[tuple[int, int, int]], n_reduce: int, itemsize: int, offset_bytes: int
) -> int:
    """get_output_vec_size: 4, halved until the input's address (in elements), the first
    output dimension's size and every other input stride divide by it."""
    vec = 4
    values = [offset_bytes // itemsize, dims[n_reduce][0]]
    values += [s_in // itemsize for i, (_, s_in, _) in enumerate(dims) if i != n_reduce]
    for n in values:
        while n % vec:
            vec //= 2
    return vec


def reduce_buffers(
    shape: Sequence[int],
    strides: Sequence[int],
    itemsize: int,
    reduced: Sequence[int],
    acc_size: int,
    card: Card,
    *,
    offset_bytes: int = 0,
    input_vec_size: int = 4,
) -> Buffers:
    """The staging buffer and semaphores `gpu_reduce_kernel` allocates for reducing a
    tensor of `shape`/`strides` (elements) over `reduced` with an accumulator of
    `acc_size` bytes."""
    numel = math.prod(shape)
    reduced_set = {d % len(shape) for d in reduced} if shape else set()
    num_outputs = math.prod(s for d, s in enumerate(shape) if d not in reduced_set)
    if numel == 0 or num_outputs == 0:
        return NONE
    inputs = numel // num_outputs
    dims = _iterator_dims(shape, strides, itemsize, reduced_set)
    n_reduce = sum(1 for _, _, s_out in dims if s_out == 0)
    output_vec = 1
    if dims:
        on_fastest = n_reduce == len(dims) or dims[0][1] < dims[n_reduce][1]
        dim0, dim1 = (inputs, num_outputs) if on_fastest else (num_outputs, inputs)
        fastest = dims[0][1] if on_fastest else dims[n_reduce][1]
        if fastest == itemsize:
            if on_fastest and dim0 >= 128 and n_reduce == 1:
                dim0 //= input_vec_size  # "vectorize along input"
            elif not on_fastest:
                output_vec = _output_vec_size(dims, n_reduce, itemsize, offset_bytes)
                dim0 //= output_vec
    else:
        on_fastest, dim0, dim1 = True, 1, 1
    max_threads = MAX_NUM_THREADS // output_vec
    dim0_pow2 = _last_pow2(dim0) if dim0 < max_threads else max_threads
    dim1_pow2 = _last_pow2(dim1) if dim1 < max_threads else max_threads
    width = min(dim0_pow2, card.warp_size)
    height = min(dim1_pow2, max_threads // width)
    width = min(dim0_pow2, max_threads // height)
    threads = width * height

    step_input, step_output = 1, 1
    if on_fastest:
        step_input *= width  # the x lanes reduce (block_x_reduce)
    else:
        step_output *= width
    split_warps = _div_up(inputs, step_input) >= min(height * 16, MAX_VALUES_PER_THREAD)
    if split_warps:
        step_input *= height
    else:
        step_output *= height
    per_thread = _div_up(inputs, step_input)
    grid_x = _div_up(num_outputs // output_vec, step_output)
    target = card.multiprocessors * (card.max_threads_per_multiprocessor // threads)
    if not (split_warps and per_thread >= MAX_VALUES_PER_THREAD and grid_x <= target):
        return NONE
    ctas = max(
        min(_div_up(target, grid_x), _div_up(per_thread, MIN_VALUES_PER_THREAD)),
        _div_up(per_thread, MAX_VALUES_PER_THREAD),
    )
    if ctas <= 1:
        return NONE
    staging = acc_size * num_outputs * ctas
    if not on_fastest:
        staging *= width * output_vec
    return Buffers(staging, 4 * grid_x)

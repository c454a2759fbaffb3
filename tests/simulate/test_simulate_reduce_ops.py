"""Every reduction that runs ATen's CUDA reduction kernel takes its staging buffer and
semaphores with its own accumulator (simulation/patches/reduce_kernel.py), worked by hand
from Reduce.cuh's setReduceConfig on an H200 (132 multiprocessors x 2048 threads).

The column reduction of a contiguous (16384, 8) tensor over dim 0, for any element size:
the x lanes take 2 vectors of 4 outputs, 64 warps split the 16384 inputs (256 each), and
one block column of 128 threads leaves room for 2112 blocks, so the inputs are split over
max(min(2112, 256 / 16), 256 / 256) = 16 blocks: the buffer holds
sizeof(accumulator) x 8 outputs x 16 blocks x (2 lanes x 4 wide) = 1024 accumulators,
and one semaphore (4 bytes).

The whole-tensor reduction of 15,360,000 values: one row of 512-thread blocks, 30,000
values per thread, capped at the 132 x 4 = 528 blocks the card runs at once: 528
accumulators, one semaphore."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402


def kernel_allocations(
    make: Callable[[], Any], op: Callable[[Any], Any], outputs: int = 1
) -> list[int]:
    """The sizes allocated by `op(make())` after its outputs, on a simulated H200."""
    with memlens.simulate(cublas_workspace=0, gpu="h200") as sim:
        x = make()
        start = len(sim.allocator.trace)
        op(x)
    allocs = [e["size"] for e in sim.allocator.trace[start:] if e["action"] == "alloc"]
    return allocs[outputs:]


def column(dtype: Any = torch.float32) -> Any:
    return torch.ones(16384, 8, device="cuda", dtype=dtype)


def whole() -> Any:
    return torch.ones(4, 384, 10000, device="cuda")


@pytest.mark.parametrize(
    ("op", "outputs", "accumulator"),
    [
        (lambda x: x.sum(0), 1, 4),
        (lambda x: x.mean(0), 1, 4),
        (lambda x: x.nansum(0), 1, 4),
        (lambda x: x.prod(0), 1, 4),
        (lambda x: torch.linalg.vector_norm(x, dim=0), 1, 4),
        (lambda x: x.norm(p=3, dim=0), 1, 4),
        (lambda x: x.amax(0), 1, 4),
        (lambda x: x.amin(0), 1, 4),
        (lambda x: x.max(0), 2, 16),  # values and an int64 index
        (lambda x: x.min(0), 2, 16),
        (lambda x: x.argmax(0), 1, 16),
        (lambda x: x.argmin(0), 1, 16),
        (lambda x: x.var(0), 1, 16),  # Welford: mean, m2, int32 n, nf
        (lambda x: x.std(0), 1, 16),
        (lambda x: torch.var_mean(x, 0), 2, 16),
        (lambda x: torch.std_mean(x, 0), 2, 16),
        (lambda x: torch.aminmax(x, dim=0), 2, 8),  # min and max, both float
    ],
)
def test_a_column_reduction_stages_1024_accumulators(op, outputs, accumulator):
    assert kernel_allocations(column, op, outputs) == [accumulator * 1024, 4]


@pytest.mark.parametrize(
    ("dtype", "op", "outputs", "accumulator"),
    [
        (torch.bfloat16, lambda x: x.sum(0), 1, 4),  # accumulates in float
        (torch.bfloat16, lambda x: x.amax(0), 1, 2),  # in bfloat16 itself
        (torch.bfloat16, lambda x: x.max(0), 2, 16),
        (torch.bfloat16, lambda x: x.var(0), 1, 16),
        (torch.bfloat16, lambda x: torch.aminmax(x, dim=0), 2, 4),
        (torch.float64, lambda x: torch.aminmax(x, dim=0), 2, 16),
        (torch.float64, lambda x: x.sum(0), 1, 8),
        (torch.float64, lambda x: x.var(0), 1, 32),
        (torch.bool, lambda x: x.any(0), 1, 1),  # the input's own type
        (torch.bool, lambda x: x.all(0), 1, 1),
    ],
)
def test_the_accumulator_follows_the_element_type(dtype, op, outputs, accumulator):
    assert kernel_allocations(lambda: column(dtype), op, outputs) == [accumulator * 1024, 4]


def test_a_bfloat16_sum_into_float_reads_without_a_copy():
    op = lambda x: x.sum(0, dtype=torch.float32)  # noqa: E731
    assert kernel_allocations(lambda: column(torch.bfloat16), op) == [4096, 4]


def test_a_float64_sum_of_float32_casts_the_input_first():
    # make_reduction: self.to(float64), 131072 x 8 bytes, then a float64 accumulator
    op = lambda x: x.sum(0, dtype=torch.float64)  # noqa: E731
    assert kernel_allocations(column, op) == [1048576, 8192, 4]


def test_counting_a_mask_casts_it_to_int64_first():
    # sum of bool into int64: make_reduction_from_out_ty converts the input (8 bytes each)
    op = lambda x: x.sum(0)  # noqa: E731
    assert kernel_allocations(lambda: column(torch.bool), op) == [1048576, 8192, 4]


@pytest.mark.parametrize(
    ("op", "accumulator"),
    [
        (lambda x: x.sum(), 4),
        (lambda x: x.max(), 4),
        (lambda x: x.argmax(), 16),
        (lambda x: x.var(), 16),
        (lambda x: torch.linalg.vector_norm(x), 4),
    ],
)
def test_a_whole_tensor_reduction_fills_the_card(op, accumulator):
    assert kernel_allocations(whole, op) == [accumulator * 528, 4]


def test_short_rows_need_no_buffer():
    # argmax along rows of 512: 16 values per thread, below the 256 a split needs
    make = lambda: torch.ones(64, 512, device="cuda")  # noqa: E731
    assert kernel_allocations(make, lambda x: x.argmax(1)) == []
    assert kernel_allocations(make, lambda x: x.var(1)) == []


def test_max_of_a_transposed_tensor_reads_a_contiguous_copy():
    # max(): self.contiguous(), 131072 floats; one row of 131072 values, 256 per thread
    # over 512 lanes, so 16 blocks of 4-byte accumulators
    make = lambda: torch.ones(8, 16384, device="cuda").t()  # noqa: E731
    assert kernel_allocations(make, lambda x: x.max()) == [524288, 64, 4]


def test_aminmax_of_everything_reads_a_contiguous_copy():
    # (min, max) pairs of 8 bytes: 528 over the whole card, 16 for the transposed copy
    assert kernel_allocations(whole, lambda x: torch.aminmax(x), outputs=2) == [4224, 4]
    make = lambda: torch.ones(8, 16384, device="cuda").t()  # noqa: E731
    assert kernel_allocations(make, lambda x: torch.aminmax(x), outputs=2) == [524288, 128, 4]
    # along a dim it reads the transposed tensor as it is, without a copy: 8 rows of 16384
    # contiguous values, 32 a thread of a 512-thread block, too few to split (256)
    assert kernel_allocations(make, lambda x: torch.aminmax(x, dim=0), outputs=2) == []


def test_argmax_of_a_transposed_tensor_flattens_a_copy():
    make = lambda: torch.ones(8, 16384, device="cuda").t()  # noqa: E731
    assert kernel_allocations(make, lambda x: x.argmax()) == [524288, 256, 4]
    # a contiguous input is viewed, not copied
    assert kernel_allocations(
        lambda: torch.ones(16384, 8, device="cuda"), lambda x: x.argmax()
    ) == [256, 4]


# logsumexp (simulation/patches/logsumexp_kernel.py): maxes, amax's buffer, abs and the
# bool mask of the maxes, the full-size difference, the output, sum's buffer
def test_logsumexp_holds_a_difference_as_large_as_its_input():
    # (64, 32000) fp32 over the last dim: rows of 32000 need no staging (63 values a thread)
    make = lambda: torch.ones(64, 32000, device="cuda")  # noqa: E731
    allocs = kernel_allocations(make, lambda x: x.logsumexp(-1), outputs=0)
    assert allocs == [256, 256, 64, 64 * 32000 * 4, 256]


def test_logsumexp_over_everything_stages_both_reductions():
    allocs = kernel_allocations(whole, lambda x: x.logsumexp((0, 1, 2)), outputs=0)
    assert allocs == [4, 2112, 4, 4, 1, 61440000, 4, 2112, 4]


def test_logsumexp_of_integers_copies_them_into_floats_first():
    make = lambda: torch.ones(16, 1024, device="cuda", dtype=torch.int64)  # noqa: E731
    allocs = kernel_allocations(make, lambda x: x.logsumexp(1), outputs=0)
    assert allocs == [65536, 64, 64, 16, 65536, 64]

"""ATen's CUDA reduction kernel takes a staging buffer and semaphores from the caching
allocator when it splits each output's inputs over several thread blocks
(simulation/patches/reduce_kernel.py). The sizes are checked against the H200 recordings
of tests/data/gpu/2026-11-28-h200 (the cs336 script's RMSNorm weight gradients) and on a
small simulated script, to the byte."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.gpus import gpu_preset  # noqa: E402
from memlens.simulation.patches.reduce_config import Buffers, Card, reduce_buffers  # noqa: E402

H200 = Card(132, 2048)


def weight_grad(context: int, card: Card = H200) -> Buffers:
    """`(grad * x).sum((0, 1))`: an RMSNorm weight's gradient, batch 4, d_model 1024."""
    shape = (4, context, 1024)
    return reduce_buffers(shape, (context * 1024, 1024, 1), 4, (0, 1), 4, card)


@pytest.mark.parametrize(
    ("context", "staging"),
    # every recording: 128 none; then 2 x the (4, context, 1024) activation, 8 semaphores
    [(128, 0), (256, 8388608), (384, 12582912), (448, 14680064), (512, 16777216)],
)
def test_the_weight_gradient_buffers_are_the_h200_recordings(context, staging):
    assert weight_grad(context) == Buffers(staging, 32 if staging else 0)


def test_reducing_along_the_fastest_dimension_needs_no_buffer_for_short_rows():
    # x.pow(2).mean(-1): 1024 values per output, one block row each
    assert reduce_buffers((4, 384, 1024), (393216, 1024, 1), 4, (2,), 4, H200) == Buffers(0, 0)


def test_the_grid_is_capped_by_the_cards_multiprocessors():
    # a whole 15,360,000-element sum: one output, as many blocks as the card runs at once
    # (132 SMs x 2048 / 512 threads = 528 on an H200, 108 x 4 = 432 on an A100)
    shape, strides = (4, 384, 10000), (3840000, 10000, 1)
    assert reduce_buffers(shape, strides, 4, (0, 1, 2), 4, H200) == Buffers(4 * 528, 4)
    assert reduce_buffers(shape, strides, 4, (0, 1, 2), 4, Card(108, 2048)) == Buffers(1728, 4)


def test_an_unaligned_view_reads_one_output_at_a_time():
    # a view starting 1 element in: no 4-wide output vectors, so a wider block
    aligned = reduce_buffers((16384, 8), (8, 1), 4, (0,), 4, H200)
    shifted = reduce_buffers((16384, 8), (9, 1), 4, (0,), 4, H200, offset_bytes=4)
    assert aligned == Buffers(4 * 8 * 16 * 2 * 4, 4)
    assert shifted == Buffers(4 * 8 * 16 * 8, 4)


def test_a_simulated_column_sum_allocates_and_frees_them_in_the_kernels_order():
    with memlens.simulate(cublas_workspace=0, gpu="h200") as sim:
        x = torch.ones(16384, 8, device="cuda")
        start = len(sim.allocator.trace)
        x.sum(0)
    entries = [(e["action"], e["size"]) for e in sim.allocator.trace[start:]]
    assert entries[:6] == [
        ("alloc", 32),  # the output, 8 floats
        ("alloc", 4096),  # staging: 4 bytes x 8 outputs x 16 blocks x (2 lanes x 4 wide)
        ("alloc", 4),  # one semaphore per block column
        ("free_requested", 4),
        ("free_completed", 4),
        ("free_requested", 4096),
    ]


def test_the_presets_say_how_many_threads_a_multiprocessor_runs():
    assert gpu_preset("h200").max_threads_per_multiprocessor == 2048
    assert gpu_preset("a10").max_threads_per_multiprocessor == 1536
    assert gpu_preset("t4").max_threads_per_multiprocessor == 1024

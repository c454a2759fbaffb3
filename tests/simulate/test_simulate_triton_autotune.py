"""Triton's autotuning at a compiled kernel's first launch (simulation/patches/
triton_autotune.py) and where Inductor's scheduler runs a fused kernel
(inductor_schedule.py), on hand-worked bytes. Against GPU recordings:
test_simulate_cudagraph_trees.py (reduce_overhead) and test_simulate_gpu_recordings.py
(compiled_index_backward, compiled_training)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.gpus import gpu_preset  # noqa: E402
from memlens.simulation.patches import triton_autotune  # noqa: E402
from memlens.simulation.patches.triton_autotune import Kernel, config_count  # noqa: E402

MiB = 2**20
H100_L2 = 50 * MiB


def calls(sim: Any, start: int = 0) -> list[tuple[str, int]]:
    snapshot = sim.snapshot or sim.build_snapshot()
    return [
        ("+" if e["action"] == "alloc" else "-", e["size"])
        for e in snapshot["device_traces"][0][start:]
        if e["action"] in ("alloc", "free_completed")
    ]


def flush(configs: int, clones: int = 0) -> list[tuple[str, int]]:
    """One config benchmarked: a call, the L2 buffer, 5 + 100 calls, the buffer freed;
    each call clones `clones` bytes (a buffer written in place) and frees the clone."""
    call = [("+", clones), ("-", clones)] if clones else []
    return (call + [("+", H100_L2)] + call * 105 + [("-", H100_L2)]) * configs


# ---------------------------------------------------------------- torch's heuristics
@pytest.mark.parametrize(
    ("kernel", "configs"),
    [
        # 1-D pointwise: XBLOCK bs and bs // 2 (bs = max(256, min(numel // 128, 1024)))
        (Kernel("pointwise", (("x", 65536),), "", (), ()), 2),
        (Kernel("pointwise", (("x", 256),), "", (), ()), 2),  # 256 and 128
        (Kernel("pointwise", (("x", 128),), "", (), ()), 1),  # both clamped to 128
        # tiled (a transpose): six tiles; one buffer in and one out: a square tile only
        (Kernel("pointwise", (("y", 2048), ("x", 512)), "", (), ()), 6),
        (Kernel("pointwise", (("y", 2048), ("x", 512)), "SQUARE", (), ()), 1),
        # persistent reductions: XBLOCK 1, 8, 32, 128 while XBLOCK x row <= 4096 ...
        (Kernel("persistent_reduction", (("x", 512), ("r0_", 32)), "DEFAULT", (), ()), 4),
        (Kernel("persistent_reduction", (("x", 2048), ("r0_", 64)), "DEFAULT", (), ()), 3),
        # ... but a row of 256 or more along the inner dimension (LayerNorm): one
        (Kernel("persistent_reduction", (("x", 2048), ("r0_", 512)), "INNER", (), ()), 1),
        (Kernel("reduction", (("x", 512), ("r0_", 128)), "DEFAULT", (), ()), 6),
    ],
)
def test_config_counts_are_torchs_own(kernel, configs):
    assert config_count(kernel, gpu_preset("h200")) == configs


def test_inductors_switch_for_pointwise_autotuning_is_followed():
    from torch._inductor import config

    kernel = Kernel("pointwise", (("x", 65536),), "", (), ())
    with config.patch({"triton.autotune_pointwise": False}):
        assert config_count(kernel, gpu_preset("h200")) == 1
    assert config_count(kernel, gpu_preset("h200")) == 2


@pytest.mark.parametrize(
    ("card", "l2"), [("h100", 50 * MiB), ("h200", 60 * MiB), ("a100", 40 * MiB)]
)
def test_the_flush_buffer_is_the_cards_l2_as_torch_cuda_answers_it(card, l2):
    # torch.cuda.get_device_properties(0).L2_cache_size on those cards (the H200's is
    # the recording's flush buffer, tests/data/gpu/graphs/reduce_overhead.pickle.gz)
    with memlens.simulate(gpu=card):
        assert torch.cuda.get_device_properties(0).L2_cache_size == l2


# ---------------------------------------------------------------- the allocations
@pytest.mark.slow
def test_a_pointwise_kernel_benchmarks_two_configs_at_its_first_launch_only():
    with memlens.simulate(cublas_workspace=0) as sim:  # an H100: 50 MiB of L2
        f = torch.compile(lambda t: (t * 2).sin() + 1)
        x = torch.randn(1024, device="cuda")  # 4,096 B
        start = len(sim.allocator.trace)
        y = f(x)  # its output, then the kernel's two configs, each with the flush buffer
        first = calls(sim, start)
        start = len(sim.allocator.trace)
        del y
        f(x)  # tuned: the output only (freed at once, not kept)
        second = calls(sim, start)
    assert first == [("+", 4096)] + flush(2)
    assert second == [("-", 4096), ("+", 4096), ("-", 4096)]
    assert triton_autotune.NOTE in sim.notes


@pytest.mark.slow
def test_a_kernel_of_128_elements_has_one_config_and_no_benchmark():
    with memlens.simulate(cublas_workspace=0) as sim:
        x = torch.randn(128, device="cuda")
        start = len(sim.allocator.trace)
        y = torch.compile(lambda t: t * 2)(x)
    assert calls(sim, start) == [("+", 512)] and y.shape == (128,)
    assert triton_autotune.NOTE not in sim.notes


def gemm_then_bias(x: Any, w: Any) -> Any:
    return (x @ w) + 1  # the pointwise kernel writes into the GEMM's buffer: an in_out_ptr


@pytest.mark.slow
def test_a_kernel_writing_in_place_clones_its_buffer_for_every_call_in_a_forward():
    size = 16 * 16 * 4  # 1,024 B, 256 elements: two configs
    with memlens.simulate(cublas_workspace=0) as sim:
        x = torch.randn(16, 16, device="cuda")
        w = torch.randn(16, 16, device="cuda", requires_grad=True)
        start = len(sim.allocator.trace)
        y = torch.compile(gemm_then_bias)(x, w)
        # a training forward: every call clones the buffer (optimize_mem is off)
        assert calls(sim, start) == [("+", size)] + flush(2, clones=size)
        del y


@pytest.mark.slow
def test_an_inference_graph_copies_to_the_host_what_exceeds_the_peak_headroom():
    size = 16 * 16 * 4
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        x, w = torch.randn(16, 16, device="cuda"), torch.randn(16, 16, device="cuda")
        start = len(sim.allocator.trace)
        y = torch.compile(gemm_then_bias)(x, w)
    # optimize_mem: max_memory_allocated() - memory_allocated() is 0 at the first
    # config, so the buffer goes to pinned host memory; the first flush buffer raised
    # the peak by 50 MiB, so the second config clones it on the device
    assert calls(sim, start) == [("+", size)] + flush(1) + flush(1, clones=size)
    assert y.shape == (16, 16)


@pytest.mark.slow
def test_a_reduction_reading_a_pointwise_buffer_whole_runs_in_its_kernel():
    def relu_gemm_and_sum(x: Any, w: Any) -> tuple[Any, Any]:
        y = (x @ w).relu()  # in place into the GEMM's buffer; a GEMM reads it next
        return y @ w, y.sum(0)  # sum(0) reads y whole: fused into relu's kernel

    with (
        memlens.simulate(cublas_workspace=0) as sim,
        torch.no_grad(),
        torch._inductor.config.patch({"triton.autotune_pointwise": False}),
    ):
        x, w = torch.randn(8, 32, device="cuda"), torch.randn(32, 32, device="cuda")
        start = len(sim.allocator.trace)
        out, total = torch.compile(relu_gemm_and_sum)(x, w)
        got = calls(sim, start)
    # the GEMM's buffer (1,024 B), then the sum's (128 B) with relu's kernel, where the
    # graph's order puts it after the second GEMM's output; the fused kernel (a
    # persistent reduction: 32 outputs of 8, XBLOCK 1, 8, 32) benchmarks 3 configs,
    # cloning the buffer relu writes in place from the second on (the first flush
    # buffer made the headroom); then the second GEMM's output, and relu's buffer dies
    assert got == (
        [("+", 1024), ("+", 128)] + flush(1) + flush(2, clones=1024) + [("+", 1024), ("-", 1024)]
    )
    assert out.shape == (8, 32) and total.shape == (32,)

"""Reductions Inductor splits in two kernels (simulation/patches/inductor_split.py) and
the kernels the scheduler fuses around them (inductor_schedule.py), on hand-worked
bytes. Against a GPU recording: test_simulate_gpu_recordings.py (compiled_training,
whose backward splits every bias and layer-norm weight gradient)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from test_simulate_triton_autotune import calls  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.gpus import gpu_preset  # noqa: E402
from memlens.simulation.patches.inductor_split import split_factor  # noqa: E402


# ------------------------------------------------------- torch's split factor, by hand
@pytest.mark.parametrize(
    ("row", "outputs", "inner", "split"),
    [
        # OUTER (a column sum): 2048 x 512 = 1 Mi values, under 32 per thread of the
        # card (32 x 132 SMs x 2048 threads = 8,650,752): blocks of 32 x 4 values,
        # 2048 / 128 = 16 splits; the same for 2048 outputs (4 Mi values)
        (2048, 512, False, 16),
        (2048, 2048, False, 16),
        # INNER, one output (a whole-tensor sum of 1 Mi values): 32 values per thread
        # of a 256-thread block, 2**20 / 8192 = 128 splits
        (1 << 20, 1, True, 128),
        # INNER with rows of at most 8192 (sm 9.0): not split
        (8192, 1, True, 1),
        # INNER with at least 2 x 132 outputs: not split
        (1 << 20, 264, True, 1),
    ],
)
def test_split_factor_is_torchs_own_on_the_card(row, outputs, inner, split):
    assert split_factor(gpu_preset("h200"), row, outputs, inner) == split


# ---------------------------------------------------------------- the allocations
def column_sum(t: Any) -> Any:
    return t.sum(0)  # a bias gradient's shape: 512 outputs of 2,048 rows


def column_var(t: Any) -> Any:
    return t.var(0)  # Welford: mean, m2 and weight per block


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fn", "dtype", "expected"),
    [
        # 16 splits x 512 outputs x 4 B = 32,768 B before the first kernel, the 2,048-byte
        # result before the second, the workspace freed after it; neither kernel has more
        # than one config (a looped OUTER reduction of 8,192 rows of 128, a persistent
        # OUTER_TINY one of 512 rows of 16): no benchmark
        (column_sum, torch.float32, [("+", 32768), ("+", 2048), ("-", 32768)]),
        # create_multilayer_helper: float32 partial sums (16 x 512 x 4 B), a bf16 result
        (column_sum, torch.bfloat16, [("+", 32768), ("+", 1024), ("-", 32768)]),
        # three workspaces of the 16 blocks of each of the 512 columns
        (column_var, torch.float32, [("+", 32768)] * 3 + [("+", 2048)] + [("-", 32768)] * 3),
    ],
)
def test_a_column_reduction_splits_into_a_workspace_of_splits_x_outputs(fn, dtype, expected):
    with memlens.simulate(gpu="h200", cublas_workspace=0) as sim, torch.no_grad():
        x = torch.randn(2048, 512, device="cuda", dtype=dtype)
        start = len(sim.allocator.trace)
        y = torch.compile(fn)(x)
        got = calls(sim, start)
    assert got == expected
    assert y.shape == (512,) and y.dtype == dtype


@pytest.mark.slow
def test_a_whole_tensor_sum_splits_and_a_row_sum_does_not():
    with memlens.simulate(gpu="h200", cublas_workspace=0) as sim, torch.no_grad():
        z = torch.randn(1 << 20, device="cuda")
        start = len(sim.allocator.trace)
        total = torch.compile(lambda t: t.sum())(z)
        whole = calls(sim, start)
        x = torch.randn(2048, 512, device="cuda")
        start = len(sim.allocator.trace)
        rows = torch.compile(lambda t: t.sum(1))(x)
        by_row = calls(sim, start)
    # 128 splits x 1 output x 4 B, then the 4-byte result
    assert whole == [("+", 512), ("+", 4), ("-", 512)]
    # 2,048 outputs of 512 (INNER, enough outputs): one kernel, its result only
    assert by_row == [("+", 8192)]
    assert total.shape == () and rows.shape == (2048,)


@pytest.mark.slow
def test_split_reductions_reading_a_buffer_in_common_share_their_first_kernel():
    def weight_and_bias_grads(g: Any, x: Any) -> tuple[Any, Any]:
        return (g * x).sum(0), g.sum(0)  # a layer norm's (or a linear's) parameter grads

    with memlens.simulate(gpu="h200", cublas_workspace=0) as sim, torch.no_grad():
        g, x = torch.randn(2048, 512, device="cuda"), torch.randn(2048, 512, device="cuda")
        start = len(sim.allocator.trace)
        w, b = torch.compile(weight_and_bias_grads)(g, x)
        got = calls(sim, start)
    # both workspaces before the one first kernel, then each result before its second
    # kernel and each workspace after it (the GPU recording's layer norms do the same)
    assert got == [("+", 32768), ("+", 32768), ("+", 2048), ("-", 32768)] + [
        ("+", 2048),
        ("-", 32768),
    ]
    assert w.shape == b.shape == (512,)


@pytest.mark.slow
def test_row_reductions_fused_with_their_epilogue_keep_no_buffer():
    def centred_scaled(t: Any) -> Any:
        return (t - t.mean(1, keepdim=True)) * t.amax(1, keepdim=True)

    with (
        memlens.simulate(gpu="h200", cublas_workspace=0) as sim,
        torch.no_grad(),
        torch._inductor.config.patch({"triton.autotune_pointwise": False}),
    ):
        x = torch.randn(2048, 512, device="cuda")
        start = len(sim.allocator.trace)
        y = torch.compile(centred_scaled)(x)
        got = calls(sim, start)
    # the sum and the amax of each row run in one kernel (the same 2,048 rows of 512,
    # reading x) with the pointwise epilogue; their 2,048 values per row never leave
    # it (kernel-local): only the 4 MiB result is allocated, and a persistent INNER
    # reduction of rows of 512 has one config
    assert got == [("+", 4194304)]
    assert y.shape == (2048, 512)

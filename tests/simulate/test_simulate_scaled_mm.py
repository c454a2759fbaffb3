"""`torch._scaled_mm` (float8 training) runs cuBLASLt's scaled_gemm on a GPU, which sets
the handle's cuBLAS workspace and takes cuBLASLt's own, as `addmm` does; row-wise
scaling off Hopper runs CUTLASS, without a cuBLAS handle (simulation/patches/cublas_lt.py;
CUTLASS's own workspace is not modelled)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402

MiB = 1 << 20
OUTPUT = 64 * 256 * 2  # (64, 256) bfloat16


def scaled_mm_allocations(gpu: str, rowwise: bool, calls: int = 1) -> list[int]:
    """Sizes allocated by `calls` float8 GEMMs (64 x 128) @ (128 x 256) into bfloat16."""
    with memlens.simulate(gpu=gpu) as sim:
        a = torch.empty(64, 128, device="cuda", dtype=torch.float8_e4m3fn)
        b = torch.empty(256, 128, device="cuda", dtype=torch.float8_e4m3fn).t()
        if rowwise:
            scale_a: Any = torch.ones(64, 1, device="cuda")
            scale_b: Any = torch.ones(1, 256, device="cuda")
        else:
            scale_a = scale_b = torch.ones((), device="cuda")
        start = len(sim.allocator.trace)
        for _ in range(calls):
            torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    return [e["size"] for e in sim.allocator.trace[start:] if e["action"] == "alloc"]


@pytest.mark.parametrize("rowwise", [False, True])
def test_a_first_scaled_mm_on_hopper_takes_both_workspaces(rowwise):
    # the output, then cuBLAS's 32 MiB (":4096:8") and cuBLASLt's 1024 KiB
    assert scaled_mm_allocations("h200", rowwise) == [OUTPUT, 32 * MiB, 1 * MiB]


def test_the_workspaces_are_kept_for_the_next_call():
    assert scaled_mm_allocations("h100", False, calls=2) == [OUTPUT, 32 * MiB, 1 * MiB, OUTPUT]


def test_tensorwise_scaling_on_ada_takes_the_smaller_cublas_workspace():
    # before Hopper cuBLAS's default is ":4096:2:16:8": 8 MiB + 128 KiB
    assert scaled_mm_allocations("l4", False) == [OUTPUT, 8 * MiB + 128 * 1024, 1 * MiB]


def test_rowwise_scaling_on_ada_runs_cutlass_without_cublas_workspaces():
    assert scaled_mm_allocations("l4", True) == [OUTPUT]


def test_cublaslt_workspace_size_follows_the_environment(monkeypatch):
    monkeypatch.setenv("CUBLASLT_WORKSPACE_SIZE", "4096")  # KiB
    assert scaled_mm_allocations("h200", False) == [OUTPUT, 32 * MiB, 4 * MiB]

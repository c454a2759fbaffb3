"""What the GPU recordings in tests/data/gpu showed the simulation lacked, on small cases
with exact events: cuBLASLt's workspace (eager and compiled `addmm` with a bias), in-place
kernels only at the index they write, SDPA traced through the CUDA backends inside a
compiled graph (`nn.MultiheadAttention` compiles instead of running eagerly)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch import Tensor, nn  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.patches.triton_autotune import made_by_autotuning  # noqa: E402

MiB = 2**20
SIZE = 64 * 64 * 4


def events(sim: Any) -> list[tuple[str, int]]:
    snapshot = sim.snapshot or sim.build_snapshot()
    return [
        ("+" if e["action"] == "alloc" else "-", e["size"])
        for e in snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_completed") and not made_by_autotuning(e)
    ]  # autotuning's buffers: test_simulate_triton_autotune.py


def linear_events(bias: bool, **options: Any) -> list[tuple[str, int]]:
    with memlens.simulate(**options) as sim, torch.no_grad():
        lin = nn.Linear(64, 64, bias=bias, device="cuda")
        x = torch.randn(64, 64, device="cuda")
        before = len(events(sim))
        y1 = lin(x)
        y2 = lin(x)
        del y1, y2
        return events(sim)[before:]


def test_a_linear_with_bias_takes_cublaslt_and_its_one_mib_workspace_once():
    # output, then the handle's cuBLAS workspace, then cuBLASLt's (gemm_and_bias); the
    # second call allocates its output only
    assert linear_events(bias=True) == [
        ("+", SIZE),
        ("+", 32 * MiB),
        ("+", MiB),
        ("+", SIZE),
        ("-", SIZE),
        ("-", SIZE),
    ]


def test_a_linear_without_bias_or_without_workspaces_has_no_cublaslt_workspace():
    assert ("+", MiB) not in linear_events(bias=False)  # mm: cuBLAS only
    assert linear_events(bias=True, cublas_workspace=0) == [
        ("+", SIZE),
        ("+", SIZE),
        ("-", SIZE),
        ("-", SIZE),
    ]


@pytest.mark.slow
def test_a_kernel_reading_a_buffer_at_another_index_does_not_write_into_it():
    def plus_transpose(x: Tensor, w: Tensor) -> Tensor:
        y = x @ w
        out: Tensor = y + y.t()  # reads y at two indices: Inductor cannot reuse it
        return out

    def plus_one(x: Tensor, w: Tensor) -> Tensor:
        out: Tensor = (x @ w) + 1  # reads y where it writes: in place
        return out

    got = {}
    for fn in (plus_transpose, plus_one):
        with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
            x, w = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
            before = len(events(sim))
            out = torch.compile(fn)(x, w)
            got[fn.__name__] = events(sim)[before:]
            del out
    assert got["plus_transpose"] == [("+", SIZE), ("+", SIZE), ("-", SIZE)]
    assert got["plus_one"] == [("+", SIZE)]


@pytest.mark.slow
def test_compiled_multihead_attention_takes_the_cuda_attention_kernel():
    with memlens.simulate(cublas_workspace=0) as sim:
        attn = nn.MultiheadAttention(64, 4, batch_first=True, device="cuda")
        x = torch.randn(2, 32, 64, device="cuda")
        out = torch.compile(attn)(x, x, x, need_weights=False)[0]
        out.sum().backward()
    # the graph compiled (it ran eagerly when SDPA's trace took the CPU kernel and failed)
    assert not any("ran eagerly" in note for note in sim.notes)
    assert "efficient" in sim.sdpa_backends  # fp32 on an H100: memory-efficient attention

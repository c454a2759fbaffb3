"""Ops whose CUDA build runs a kernel the CPU build lacks run as on a GPU
(memlens.simulation.patches.cuda_kernels; the table in docs/cuda-kernels.md).

bf16 `torch.nn.RMSNorm` on a (4, 256, 1024) input: the fused kernel allocates the output
(4 x 256 x 1024 x 2 B = 2 MiB) and rstd (4 x 256 fp32 = 4,096 B); autograd keeps the input,
the weight and rstd. The CPU build's composite instead kept an fp32 upcast of the input
(4 MiB), the rsqrt and the product, and returned a CPU fake tensor.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.patches import cuda_kernels  # noqa: E402

BF16 = torch.bfloat16
ROOT = Path(__file__).resolve().parents[2]
MIB = 2**20
DOC = Path("docs") / "cuda-kernels.md"


def events(sim) -> list[tuple[str, int]]:
    snapshot = sim.snapshot or sim.build_snapshot()
    return [
        ("+" if e["action"] == "alloc" else "-", e["size"])
        for e in snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_completed")
    ]


def test_bf16_rmsnorm_keeps_the_fused_kernels_output_and_rstd():
    with memlens.simulate(cublas_workspace=0) as sim:
        norm = torch.nn.RMSNorm(1024, device="cuda", dtype=BF16)  # weight: 2,048 B
        x = torch.randn(4, 256, 1024, device="cuda", dtype=BF16, requires_grad=True)
        before = torch.cuda.memory_allocated()
        y = norm(x)
        assert y.device == torch.device("cuda", 0)  # the composite's type_as gave cpu
        assert type(y.grad_fn).__name__ == "FusedRmsNormBackward0"
        assert events(sim)[2:] == [("+", 2 * MIB), ("+", 4096)]
        assert torch.cuda.memory_allocated() - before == 2 * MIB + 4096
        loss = y.sum()  # a bf16 scalar: one 512-byte block
        # the reduction kernel's staging buffer (128 blocks of one fp32) and semaphore,
        # freed at its return (patches/reduce_kernel.py)
        assert events(sim)[4:9] == [("+", 2), ("+", 512), ("+", 4), ("-", 4), ("-", 512)]
        del y
        # what autograd keeps for backward: rstd (the input and weight are the caller's)
        assert torch.cuda.memory_allocated() - before == 4096 + 512
        loss.backward()
        assert x.grad is not None and x.grad.device == torch.device("cuda", 0)
        assert norm.weight.grad is not None and norm.weight.grad.dtype == BF16
    assert events(sim)[10:] == [  # after: weight, x, Y, rstd, the loss and its buffers, Y freed
        ("+", 2),  # sum's gradient, expanded (a stride-0 view) to the output's shape
        ("+", 2 * MIB),  # dX: x.grad
        ("+", 2048),  # dgamma: the weight's gradient
        ("+", 2 * MIB),  # dY.contiguous() inside the kernel's launcher
        ("-", 2 * MIB),
        ("-", 4096),  # rstd, with the graph
        ("-", 2),
    ]


def test_a_non_contiguous_input_is_copied_for_the_kernel_and_freed_at_its_return():
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        x = torch.randn(1024, 512, device="cuda", dtype=BF16)  # 1 MiB
        torch.nn.functional.rms_norm(x.t(), (1024,))
    assert events(sim) == [
        ("+", MIB),
        ("+", MIB),  # x.t().contiguous()
        ("+", MIB),  # Y
        ("+", 2048),  # rstd: 512 rows of fp32
        ("-", MIB),  # the copy, at the kernel's return
        ("-", 2048),  # rstd: rms_norm returns Y only
        ("-", MIB),  # Y, dropped by the caller
    ]


def test_the_cpu_build_decomposes_outside_a_simulation_again():
    # the CPU kernel registered while simulating is removed at exit
    with memlens.simulate(cublas_workspace=0):
        pass
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert not has("aten::_fused_rms_norm", "CPU")
    x = torch.randn(3, 8)
    y = torch.nn.functional.rms_norm(x, (8,))
    assert y.grad_fn is None and torch.allclose(
        y, x * torch.rsqrt(x.pow(2).mean(-1, True) + 1.1920928955078125e-07)
    )


def test_every_composite_on_cpu_op_of_the_installed_torch_is_modelled():
    spec = importlib.util.spec_from_file_location("gen", ROOT / "scripts" / "gen_cuda_kernels.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rows = gen.classify()
    composite = sorted(r.name for r in rows if r.kind == gen.COMPOSITE_ON_CPU)
    assert composite == ["_fused_rms_norm"]
    assert set(cuda_kernels.COMPOSITE_ON_CPU) == set(composite)
    for name in composite:
        assert getattr(torch.ops.aten, name).default in cuda_kernels.MODELS


def table_torch_version() -> str:
    """The torch release docs/cuda-kernels.md was generated from (its header says)."""
    found = re.search(r"from torch (\S+)'s own registrations", (ROOT / DOC).read_text())
    assert found, "docs/cuda-kernels.md names no torch release"
    return found.group(1)


def test_the_checked_in_table_is_the_generators_output():
    # the table is the pinned build's; another release registers other ops (2.14.1 and
    # 2.15.0 each give another table), and under it the check that matters is the one
    # below: every composite-on-CPU op of the installed torch is modelled
    made_from, installed = table_torch_version(), torch.__version__.split("+")[0]
    if installed != made_from:
        pytest.skip(f"docs/cuda-kernels.md is torch {made_from}'s table; this is {installed}")
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_cuda_kernels.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr

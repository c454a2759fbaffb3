"""No host tensors where a GPU has device ones: the minimal reproductions of issue 36.

Fake CUDA tensors carry CPU dispatch keys, so C++ code that takes a device from a
tensor's options() reads `cpu` (see memlens.simulation.patches.fake_cuda). Each test
here failed before its fix: a bf16 `RMSNorm` returned a CPU fake (eager: the CPU build's
composite; compiled: Inductor's decomposition's `type_as`), and a compiled embedding
lookup's backward scattered its CUDA gradient into a host `zeros` the traced graph asked
for (`Mismatching aten.index_put.default device between self (cpu) and values (cuda:0)`),
and a compiled loss that upcasts bf16 logits (torchtitan's chunked cross-entropy) sent
the logits' gradient to the host through a `prims.device_put(grad, cpu)`, so the eager
`mm` of the head's backward stopped on `FakeTensorDeviceMismatchError`; and a compiled
`type_as` (torchtitan's rotary embedding) named the device AOTAutograd's functional
wrappers read, `cpu`, so the query went to the host and the graph ran eagerly.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import Tensor, nn  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.patches.triton_autotune import made_by_autotuning  # noqa: E402

CUDA0 = torch.device("cuda", 0)


def events(sim) -> list[tuple[str, int]]:
    return [
        ("+" if e["action"] == "alloc" else "-", e["size"])
        for e in sim.snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_completed") and not made_by_autotuning(e)
    ]  # autotuning's buffers: test_simulate_triton_autotune.py


class Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(1000, 64))

    def forward(self, ids: Tensor) -> Tensor:
        picked: Tensor = self.weight[ids, :]
        return picked


def test_eager_bf16_rmsnorm_returns_a_cuda_tensor():
    with memlens.simulate(cublas_workspace=0):
        norm = torch.nn.RMSNorm(64, device="cuda", dtype=torch.bfloat16)
        y = norm(torch.randn(8, 64, device="cuda", dtype=torch.bfloat16))
        assert y.device == CUDA0


def test_compiled_bf16_rmsnorm_returns_a_cuda_tensor_and_cuda_gradients():
    with memlens.simulate(cublas_workspace=0):
        norm = torch.compile(torch.nn.RMSNorm(64, device="cuda", dtype=torch.bfloat16))
        x = torch.randn(8, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        y = norm(x)
        assert y.device == CUDA0
        y.sum().backward()
        assert x.grad is not None and x.grad.device == CUDA0


def test_compiled_index_backward_accumulates_into_a_cuda_gradient():
    with memlens.simulate(cublas_workspace=0) as sim:
        model = torch.compile(Lookup().cuda())
        ids = torch.randint(0, 1000, (8, 16), device="cuda")
        out = model(ids)
        out.sum().backward()
        grad = model.weight.grad
        assert grad is not None and grad.device == CUDA0
        del out
    assert events(sim) == [
        ("+", 256_000),  # the weight, 1000 x 64 fp32
        ("+", 1_024),  # ids, 8 x 16 int64
        ("+", 32_768),  # the lookup, 8 x 16 x 64 fp32 (the compiled forward's output)
        ("+", 4),  # the loss
        ("+", 4),  # its gradient, expanded to the lookup's shape
        ("+", 32_768),  # AOTAutograd makes the expanded tangent contiguous
        ("+", 256_000),  # the compiled backward's zeros, index_put into: the weight's grad
        ("-", 32_768),
        ("-", 4),
        ("-", 4),
        ("-", 32_768),  # `del out`
    ]


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """torchtitan's `cross_entropy_loss`: bf16 logits upcast inside the compiled loss."""
    loss: Tensor = F.cross_entropy(
        logits.flatten(0, 1).float(), labels.flatten(0, 1), reduction="sum"
    )
    return loss


def test_compiled_upcast_loss_returns_a_cuda_gradient_of_the_logits():
    with memlens.simulate(cublas_workspace=0) as sim:
        logits = torch.randn(2, 16, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        labels = torch.randint(0, 256, (2, 16), device="cuda")
        loss = torch.compile(cross_entropy)(logits, labels)
        loss.backward()
        grad = logits.grad
        assert grad is not None and grad.device == CUDA0 and grad.dtype == torch.bfloat16
        del loss
    assert events(sim) == [
        ("+", 16_384),  # the logits, 2 x 16 x 256 bf16
        ("+", 256),  # the labels, 32 int64
        ("+", 128),  # saved for backward: the rows' max (32 x 1 fp32)
        ("+", 128),  # and the log of their sum of exponentials
        ("+", 4),  # the loss
        ("+", 4),  # its gradient (backward's ones)
        # the compiled backward's row sums stay in its kernel, which writes the gradient
        # from them (a kernel-local buffer, inductor_schedule.py): no allocation
        ("+", 16_384),  # the logits' gradient, bf16 on the device (the graph's output)
        ("-", 128),
        ("-", 128),
        ("-", 4),
        ("-", 4),  # `del loss`
    ]


def scaled(x: Tensor, w: Tensor) -> Tensor:
    """A bf16 value computed in fp32 and cast back with `type_as`, then a GEMM."""
    return (x.float() * 2).type_as(x) @ w


def test_compiled_type_as_stays_on_the_device_and_in_the_graph():
    with memlens.simulate(cublas_workspace=0) as sim:
        x = torch.randn(8, 16, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(16, 16, device="cuda", dtype=torch.bfloat16)
        y = torch.compile(scaled)(x, w)
        assert y.device == CUDA0
    assert not [n for n in sim.notes if "ran eagerly" in n]
    assert events(sim) == [
        ("+", 256),  # x, 8 x 16 bf16
        ("+", 512),  # w, 16 x 16 bf16
        ("+", 256),  # the fused cast-multiply-cast kernel's output: the GEMM's input
        ("+", 256),  # the GEMM's output
        ("-", 256),  # its input, after its last kernel
    ]


def test_compiled_backward_factories_are_on_the_ranks_device():
    # a rank that called set_device(LOCAL_RANK): the compiled index backward's zeros go
    # to its device, not cuda:0 (torchtitan's FSDP 4, compiled: ranks 1-3 ran eagerly)
    with memlens.simulate(cublas_workspace=0) as sim:
        torch.cuda.set_device(1)
        model = torch.compile(Lookup().cuda())
        ids = torch.randint(0, 1000, (8, 16), device="cuda")
        model(ids).sum().backward()
        grad = model.weight.grad
        assert grad is not None and grad.device == torch.device("cuda", 1)
    assert not [n for n in sim.notes if "ran eagerly" in n]

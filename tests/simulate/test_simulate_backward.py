"""Backward takes the GPU's in-place paths although fakes look like tensor subclasses
to C++ autograd (simulation/patches/inplace.py): gradient accumulation and scatter-into-zeros
formulas allocate nothing where a GPU allocates nothing."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402

KIB16 = 64 * 64 * 4


def backward_allocs(build) -> list[int]:
    with memlens.simulate(cublas_workspace=0) as sim:
        loss = build()
        start = len(sim.allocator.trace)
        loss.backward()
    return [e["size"] for e in sim.allocator.trace[start:] if e["action"] == "alloc"]


def test_gradient_accumulation_is_in_place_when_the_buffer_holds_the_only_reference():
    def build():
        w = torch.nn.Parameter(torch.randn(64, 64, device="cuda"))
        a = w * torch.randn(64, 64, device="cuda")
        return (a.sin() + a.cos()).sum()

    # ones; cos path: sin(a), neg, mul (stored in a's buffer); sin path: cos(a), mul,
    # added in place into the buffer (out of place would allocate one more); w's gradient
    assert backward_allocs(build) == [4, KIB16, KIB16, KIB16, KIB16, KIB16, KIB16]


def test_shared_gradients_are_still_accumulated_out_of_place():
    def build():
        w = torch.nn.Parameter(torch.randn(64, 64, device="cuda"))
        a = w * torch.randn(64, 64, device="cuda")
        return (a + (a.sin() + a.cos())).sum()  # a's first gradient is also the sum's

    allocs = backward_allocs(build)
    # ones; cos path (3); the out-of-place sum (the first gradient is shared); sin path
    # (2), added in place; w's gradient (1)
    assert allocs == [4] + [KIB16] * 7


def test_gather_backward_scatters_into_its_zeros_in_place():
    def build():
        w = torch.nn.Parameter(torch.randn(64, 64, device="cuda"))
        idx = torch.zeros(64, 1, dtype=torch.long, device="cuda")
        return w.gather(1, idx).sum()

    assert backward_allocs(build) == [4, KIB16]  # ones, the zeros scattered into


def test_embedding_style_index_backward_puts_into_its_zeros_in_place():
    def build():
        w = torch.nn.Parameter(torch.randn(64, 64, device="cuda"))
        ids = torch.zeros(8, dtype=torch.long, device="cuda")
        return w[ids].sum()

    # the sum's gradient, the zeros; then the sort-based accumulation's temporaries (8
    # int64 indices: the linear index twice; the sum's expanded gradient made contiguous,
    # 8 x 64 floats; sorted indices, positions, arange; cub's 1-byte sort storage)
    assert backward_allocs(build) == [4, KIB16, 64, 64, 2048, 64, 64, 64, 1]


def test_backward_allocations_are_named_by_their_autograd_node_as_on_a_gpu():
    from memlens.analysis.peak import peak

    with memlens.simulate(cublas_workspace=0) as sim:
        w = torch.nn.Parameter(torch.randn(64, 64, device="cuda"))
        x = torch.randn(64, 64, device="cuda")
        (x @ w).sum().backward()
        keep = w.grad
    # the backward thread has no Python frames on a GPU: the node's apply names it
    sites = {s["site"] for s in peak(memlens.load(sim.snapshot).device(0))["by_site"]}
    assert any("MmBackward0::apply" in s for s in sites), sites
    assert sim.snapshot is not None
    frames = [e["frames"] for e in sim.snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert frames[-1] == [
        {
            "filename": "??",
            "line": 0,
            "name": "torch::autograd::generated::MmBackward0::apply"
            "(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)",
        }
    ]
    del keep


def test_max_backward_scatters_into_its_zeros_in_place():
    # value_selecting_reduction_backward: zeros(sizes).scatter_(dim, indices, grad) on a
    # GPU; the out-of-place `scatter` a subclass gets would add one (64, 64) block
    def build():
        w = torch.nn.Parameter(torch.randn(64, 64, device="cuda"))
        return w.max(dim=1).values.sum()

    assert backward_allocs(build) == [4, KIB16]  # ones, the zeros scattered into


def test_accumulation_is_in_place_into_a_dense_gradient_in_a_permuted_layout():
    # input_buffer.cpp asks is_non_overlapping_and_dense, not is_contiguous: k's gradients
    # come out transposed (like a key's after `q @ k.transpose`) and are still added in place
    def build():
        w = torch.nn.Parameter(torch.randn(64, 64, device="cuda"))
        k = (w * torch.randn(64, 64, device="cuda")).t()
        return (k.sin() + k.cos()).sum()

    # the same as the contiguous case: one block fewer than out of place
    assert backward_allocs(build) == [4, KIB16, KIB16, KIB16, KIB16, KIB16, KIB16]

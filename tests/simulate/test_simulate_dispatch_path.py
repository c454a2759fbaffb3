"""What the tracker answers itself on its per-op hot path (issue 34) is what the fake mode
would have answered: `prim.device` (C++ asking a fake tensor its device) and
`_unsafe_view` (einsum's reshape of a GEMM's result) computed as the cached `view`."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import memlens  # noqa: E402


def allocs(sim: Any, start: int = 0) -> list[int]:
    return [e["size"] for e in sim.allocator.trace[start:] if e["action"] == "alloc"]


def test_unsafe_view_shares_its_input_storage_and_is_served_by_the_fake_cache() -> None:
    FakeTensorMode.cache_clear()
    with memlens.simulate(cublas_workspace=0) as sim:
        a = torch.empty(4, 8, 16, device="cuda")
        w = torch.empty(32, 16, device="cuda")
        start = len(sim.allocator.trace)
        out = torch.einsum("bsi,oi->bso", a, w)  # bmm, then _unsafe_view of its result
        flat = torch.ops.aten._unsafe_view.default(out, [32, 32])
        assert flat.untyped_storage()._cdata == out.untyped_storage()._cdata
        assert (flat.shape, flat.stride(), flat.device) == ((32, 32), (32, 1), out.device)
        made = allocs(sim, start)
    assert made == [4 * 8 * 32 * 4]  # the GEMM's result alone: views allocate nothing
    # without the tracker's `view`, FakeTensorMode computes each one uncached
    assert "unsafe view" not in FakeTensorMode.cache_info().bypasses


def test_unsafe_view_of_a_tensor_view_cannot_take_still_answers_as_the_fake_mode() -> None:
    with memlens.simulate(cublas_workspace=0) as sim:
        t = torch.empty(8, 16, device="cuda").t()  # not viewable as (128,)
        start = len(sim.allocator.trace)
        with pytest.raises(Exception, match="view"):
            torch.ops.aten._unsafe_view.default(t, [128])
        assert allocs(sim, start) == []


def test_prim_device_reads_cpu_in_cpp_and_cuda_in_python_inside_backward() -> None:
    # every op of a backward asks its tensors' device first; the gradient lands on the
    # fake GPU and accumulates in place as on a GPU (test_simulate_backward.py's paths)
    with memlens.simulate(cublas_workspace=0) as sim:
        w = torch.nn.Parameter(torch.empty(64, 64, device="cuda"))
        loss = (w * 2).sum()
        start = len(sim.allocator.trace)
        loss.backward()
        assert w.grad is not None and w.grad.device == torch.device("cuda", 0)
        assert w.grad.is_cuda
        made = allocs(sim, start)
    assert made == [4, 64 * 64 * 4]  # ones for the sum's gradient, w's gradient

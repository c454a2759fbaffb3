"""A compiled graph's values live until their last user in the order its kernels run
(simulation/patches/torch_compile.py `GraphRunner`), not the graph's order.

A fused kernel's nodes run where its first node is (inductor_schedule.py), earlier than
the graph has them, so the graph's last user of a value may run before another of its
users. torchtitan's compiled loss under tensor parallel (the vocab-parallel cross
entropy: the labels' `where`, read by the range check `lt`/`ge` and by the shifted
labels `sub`, which a scatter kernel fused earlier reads) stopped on `KeyError: where`
when the value was dropped after `sub`, its last user in the graph's order.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def vocab_parallel_labels(t: Any) -> tuple[Any, Any, Any]:
    """The shape of the labels' part of torchtitan's TP cross entropy."""
    keep = t != -100
    w = torch.where(keep, t, 0)  # read by lt, ge and sub: fused, no buffer
    bad = (w < 0) | (w >= 1024)  # out of this rank's vocabulary shard
    shifted = w - 5  # the shard's first token id
    a = shifted.clone()
    a[bad] = 0
    b = shifted.clone()
    b[bad] = 1
    return a, b, keep.unsqueeze(-1)


def test_a_value_read_by_a_kernel_fused_earlier_lives_to_its_last_reader():
    with (
        memlens.simulate(cublas_workspace=0) as sim,
        torch.no_grad(),
        torch._inductor.config.patch({"triton.autotune_pointwise": False}),
    ):
        t = torch.zeros(4096, dtype=torch.int64, device="cuda")
        start = len(sim.allocator.trace)
        a, b, keep = torch.compile(vocab_parallel_labels)(t)
        snapshot = sim.snapshot or sim.build_snapshot()
    got = [
        ("+" if e["action"] == "alloc" else "-", e["size"])
        for e in snapshot["device_traces"][0][start:]
        if e["action"] in ("alloc", "free_completed")
    ]
    # the graph ran (it stopped on KeyError before): the three outputs' buffers, `ne`'s
    # (4,096 bools) and the two scatters' (4,096 int64 each), which its kernel runs
    assert got == [("+", 4096), ("+", 32768), ("+", 32768)]
    assert a.shape == b.shape == (4096,) and keep.shape == (4096, 1)

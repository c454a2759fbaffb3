"""`_foreach_norm` and `clip_grad_norm_` allocate what CUDA's foreach kernels do
(simulation/patches/foreach_reduce.py), worked by hand.

The gradients of the fast-route cases: 100,000 values (two 65,536-value chunks), 65,536
(exactly one chunk) and 10, so `output_per_tensor` holds 3 tensors x 2 chunks = 6
partials of the opmath type before the three 0-dim results, and is freed after them.
Sizes are the requested bytes of the allocator's trace (each rounds to a 512-byte block).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402

SIZES = (100_000, 65_536, 10)


def trace_of(make: Callable[[], Any], op: Callable[[Any], Any]) -> list[tuple[str, int]]:
    """(alloc|free, requested bytes) of `op(make())` on a simulated H200, in order."""
    with memlens.simulate(cublas_workspace=0, gpu="h200") as sim:
        x = make()
        start = len(sim.allocator.trace)
        kept = op(x)
        events = [
            ("alloc" if e["action"] == "alloc" else "free", e["size"])
            for e in sim.allocator.trace[start:]
            if e["action"] in ("alloc", "free_completed")
        ]
        del kept
    return events


def grads(dtype: Any = torch.float32, sizes: tuple[int, ...] = SIZES) -> list[Any]:
    return [torch.ones(n, device="cuda", dtype=dtype) for n in sizes]


def test_the_partials_come_before_the_results_and_go_after_them():
    events = trace_of(grads, lambda g: torch._foreach_norm(g))
    assert events == [("alloc", 24), ("alloc", 4), ("alloc", 4), ("alloc", 4), ("free", 24)]


@pytest.mark.parametrize(
    ("dtype", "out", "partial", "result"),
    [
        (torch.bfloat16, None, 4, 2),  # partials in float, results in bfloat16
        (torch.float16, None, 4, 2),
        (torch.float64, None, 8, 8),
        (torch.bfloat16, torch.float32, 4, 4),  # dtype= sets the results' type
        (torch.bfloat16, torch.float64, 8, 8),
    ],
)
def test_partials_are_in_the_output_opmath_type(dtype, out, partial, result):
    events = trace_of(lambda: grads(dtype), lambda g: torch._foreach_norm(g, 2, dtype=out))
    assert events == [("alloc", 6 * partial)] + [("alloc", result)] * 3 + [("free", 6 * partial)]


@pytest.mark.parametrize("ord", [0, 1, 2, float("inf")])
def test_every_fast_ord_takes_the_same_buffers(ord):
    assert trace_of(grads, lambda g: torch._foreach_norm(g, ord))[0] == ("alloc", 24)


def test_an_empty_tensor_gets_a_zero_made_after_the_kernels():
    # three results made, the third left over (freed), a zero for the empty tensor
    events = trace_of(lambda: grads(sizes=(100_000, 0, 10)), lambda g: torch._foreach_norm(g))
    assert events == [
        ("alloc", 24),
        ("alloc", 4),
        ("alloc", 4),
        ("alloc", 4),
        ("alloc", 4),
        ("free", 4),
        ("free", 24),
    ]


def test_only_empty_tensors_need_no_partials():
    # zeros({0}) takes no block; both results are made, left over, and freed after the zeros
    events = trace_of(lambda: grads(sizes=(0, 0)), lambda g: torch._foreach_norm(g))
    assert events == [("alloc", 4)] * 4 + [("free", 4)] * 2


def large() -> list[Any]:
    # 15,360,000 values: 235 chunks, so 2 x 235 float partials; as one linalg_vector_norm
    # it stages 528 accumulators (test_simulate_reduce_ops: the whole-tensor reduction)
    return [torch.ones(4, 384, 10000, device="cuda"), torch.ones(10, device="cuda")]


def test_a_tensor_of_many_chunks_sizes_the_partials_of_every_tensor():
    events = trace_of(large, lambda g: torch._foreach_norm(g))
    assert events == [("alloc", 1880), ("alloc", 4), ("alloc", 4), ("free", 1880)]


def test_another_ord_runs_one_vector_norm_per_tensor():
    # the slow route: each result, then its reduction's staging buffer and semaphore
    events = trace_of(large, lambda g: torch._foreach_norm(g, 3))
    assert events == [
        ("alloc", 4),
        ("alloc", 2112),
        ("alloc", 4),
        ("free", 4),
        ("free", 2112),
        ("alloc", 4),
    ]


@pytest.mark.parametrize(
    "make",
    [
        lambda: [torch.ones(4, 384, 10000, device="cuda"), torch.ones(10, device="cuda").half()],
        lambda: [
            torch.ones(4, 384, 20000, device="cuda")[:, :, ::2],
            torch.ones(10, device="cuda"),
        ],
    ],
    ids=["mixed types", "not dense"],
)
def test_lists_off_the_fast_route_take_the_slow_one(make):
    events = trace_of(make, lambda g: torch._foreach_norm(g))
    assert events[:3] == [("alloc", 4), ("alloc", 2112), ("alloc", 4)]


def test_foreach_max_stages_partials_of_the_input_type():
    events = trace_of(lambda: grads(torch.bfloat16), lambda g: torch._foreach_max(g))
    assert events == [("alloc", 12), ("alloc", 2), ("alloc", 2), ("alloc", 2), ("free", 12)]


def test_foreach_powsum_stages_like_the_norm_for_ord_1_and_2():
    events = trace_of(grads, lambda g: torch._foreach_powsum(g, 2))
    assert events == [("alloc", 24), ("alloc", 4), ("alloc", 4), ("alloc", 4), ("free", 24)]
    # another ord: linalg__powsum per tensor, not modelled beyond its results
    assert trace_of(grads, lambda g: torch._foreach_powsum(g, 3)) == [("alloc", 4)] * 3


def params(sizes: tuple[int, ...] = SIZES, dtypes: tuple[Any, ...] = ()) -> list[Any]:
    made = []
    for n, dtype in zip(sizes, dtypes or (torch.float32,) * len(sizes), strict=True):
        p = torch.nn.Parameter(torch.ones(n, device="cuda", dtype=dtype))
        p.grad = torch.ones(n, device="cuda", dtype=dtype)
        made.append(p)
    return made


def test_clip_grad_norm_allocates_what_a_gpu_does():
    events = trace_of(params, lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0))
    assert events == [
        # _foreach_norm of the one (cuda, float32) group
        ("alloc", 24),
        ("alloc", 4),
        ("alloc", 4),
        ("alloc", 4),
        ("free", 24),
        # torch.stack of the three norms, and the vector norm of the stack: 3 values
        # need no staging buffer; the stack, then the norms, are dropped
        ("alloc", 12),
        ("alloc", 4),
        ("free", 12),
        ("free", 4),
        ("free", 4),
        ("free", 4),
        # max_norm / (total_norm + 1e-6): the sum, reciprocal() * max_norm
        ("alloc", 4),
        ("alloc", 4),
        ("alloc", 4),
        ("free", 4),
        ("free", 4),
        # clamp(max=1.0); _foreach_mul_ scales in place; the coefficients are dropped
        ("alloc", 4),
        ("free", 4),
        ("free", 4),
    ]


def test_clip_grad_norm_runs_one_foreach_norm_per_type():
    make = lambda: params(SIZES, (torch.float32, torch.bfloat16, torch.float32))  # noqa: E731
    events = trace_of(make, lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0))
    assert events[:13] == [
        # the groups come from a C++ unordered_map, which puts each new key in front: the
        # bfloat16 group first (65,536 values, one float partial, a bfloat16 norm)
        ("alloc", 4),
        ("alloc", 2),
        ("free", 4),
        # float32: 100,000 and 10 values, 2 x 2 float partials
        ("alloc", 16),
        ("alloc", 4),
        ("alloc", 4),
        ("free", 16),
        # the stack promotes to float32 (CUDA's cat converts while copying), its norm
        ("alloc", 12),
        ("alloc", 4),
        ("free", 12),
        # the norms, the list dropped last to first
        ("free", 4),
        ("free", 4),
        ("free", 2),
    ]

"""The tracker's memo in front of FakeTensorMode's cache (issue 34, dispatch_memo.py) answers
each call as FakeTensorMode does: the same shapes, strides, offsets, dtypes and devices, the
same aliasing (in-place outputs are their argument, views share its storage, other outputs
get storages of their own), and so the same allocations, entry for entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.patches import dispatch_memo  # noqa: E402


def _calls(ts: dict[str, Any]) -> list[tuple[str, Callable[[], Any]]]:
    a, b, m, v = ts["a"], ts["b"], ts["m"], ts["v"]
    return [
        ("add", lambda: a + b),
        ("add of a transposed view", lambda: a.t() + 1.0),
        ("mul scalar kwarg", lambda: torch.mul(a, 2)),
        ("in-place add", lambda: a.add_(b)),
        ("in-place on a view", lambda: a[1:].mul_(2.0)),
        ("view", lambda: a.view(8, 4)),
        ("slice", lambda: a[1:, 2:]),
        ("transpose", lambda: a.transpose(0, 1)),
        ("expand", lambda: v.expand(4, 8)),
        ("sum keepdim", lambda: a.sum(dim=1, keepdim=True)),
        ("max: a tuple of fresh outputs", lambda: torch.max(a, dim=0)),
        ("mm", lambda: a @ m),
        ("cat of a list", lambda: torch.cat([a, b], dim=0)),
        ("to half", lambda: a.to(torch.float16)),
        ("factory with kwargs", lambda: torch.zeros(3, 5, device="cuda", dtype=torch.int64)),
        ("empty_strided", lambda: torch.empty_strided((4, 3), (1, 4), device="cuda")),
        ("unsqueeze of a sliced view", lambda: a[:, 1:].unsqueeze(0)),
    ]


def _describe(out: Any, ts: dict[str, Any]) -> Any:
    """Everything FakeTensorMode's answer fixes, with aliasing named by argument."""
    if isinstance(out, tuple):
        return tuple(_describe(o, ts) for o in out)
    same = [name for name, t in ts.items() if out is t]
    shares = [
        name for name, t in ts.items() if out.untyped_storage()._cdata == t.untyped_storage()._cdata
    ]
    return (
        type(out).__name__,
        tuple(out.shape),
        out.stride(),
        out.storage_offset(),
        out.dtype,
        out.device,
        out.requires_grad,
        out.untyped_storage().nbytes(),
        same,
        shares,
        # what FakeTensor's constructor sets: its attributes, the C++ dispatch keys
        sorted((k, "mode" if v is out.fake_mode else repr(v)) for k, v in vars(out).items()),
        str(torch._C._dispatch_keys(out)),
        out.is_cuda,
    )


def _run(fast: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any], int]:
    """Each call twice (the second is a FakeTensorMode cache hit), and what came out."""
    hits = []
    output = dispatch_memo.DispatchMemo.output

    def counted(self: Any, func: Any, entry: Any, args: Any) -> Any:
        hits.append(func)
        return output(self, func, entry, args)

    with monkeypatch.context() as m:
        m.setattr(dispatch_memo.DispatchMemo, "output", counted)
        if not fast:
            m.setattr(dispatch_memo.DispatchMemo, "applies_to", lambda self, func: False)
        with memlens.simulate(cublas_workspace=0) as sim:
            ts = {
                "a": torch.empty(4, 8, device="cuda"),
                "b": torch.empty(4, 8, device="cuda"),
                "m": torch.empty(8, 3, device="cuda"),
                "v": torch.empty(8, device="cuda"),
            }
            seen = []
            for _, call in _calls(ts):
                for _ in range(2):
                    seen.append(_describe(call(), ts))
            trace = [(e["action"], e["size"]) for e in sim.allocator.trace]
    return seen, trace, len(hits)


def test_the_memo_answers_every_call_as_fake_tensor_mode_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    FakeTensorMode.cache_clear()
    slow, slow_trace, slow_hits = _run(False, monkeypatch)
    fast, fast_trace, fast_hits = _run(True, monkeypatch)
    assert slow_hits == 0
    assert fast_hits >= len(_calls({k: None for k in "abmv"}))  # the second calls at least
    names = [name for name, _ in _calls({k: None for k in "abmv"}) for _ in range(2)]
    for name, want, got in zip(names, slow, fast, strict=True):
        assert got == want, name
    assert fast_trace == slow_trace


def test_aliasing_as_expected_on_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # the facts the comparison above rests on, stated outright for the second calls
    seen, _, hits = _run(True, monkeypatch)
    assert hits > 0
    by_name = dict(zip([n for n, _ in _calls({k: None for k in "abmv"})], seen[1::2], strict=True))
    assert by_name["add"][8:10] == ([], [])  # its own storage
    assert by_name["in-place add"][8:10] == (["a"], ["a"])  # the argument itself
    assert by_name["slice"][1:4] == ((3, 6), (8, 1), 10)
    assert by_name["slice"][9] == ["a"]  # a view of a's storage
    assert by_name["add of a transposed view"][1:3] == ((8, 4), (1, 8))
    assert by_name["empty_strided"][1:3] == ((4, 3), (1, 4))
    values, indices = by_name["max: a tuple of fresh outputs"]
    assert (values[4], indices[4]) == (torch.float32, torch.int64)
    assert values[9] == [] and indices[9] == []


def test_symbolic_or_foreign_arguments_take_the_normal_way() -> None:
    mode = FakeTensorMode()
    memo = dispatch_memo.DispatchMemo(mode)
    with mode:
        t = torch.empty(3)
    # not the current fake mode: no key
    assert memo.key((t,), {}) is None
    with mode:
        assert memo.key((t, lambda: None), {}) is None  # a callable
        assert memo.key((t, object()), {}) is None
        assert memo.key((torch.empty(3), 2), {"alpha": 1}) is not None
        # keys tell 1 from 1.0 and True, as FakeTensorMode's do
        assert len({memo.key((t, x), {}) for x in (1, 1.0, True)}) == 3
        # and a list from a tuple, and a tensor's strides
        assert memo.key((t, [1]), {}) != memo.key((t, (1,)), {})
        u = torch.empty(3, 2)
        assert memo.key((u,), {}) != memo.key((torch.empty(2, 3).t(),), {})

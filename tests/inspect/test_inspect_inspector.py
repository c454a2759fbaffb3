"""End to end on CPU with small real models: what the inspector saved equals statistics
computed directly from the same tensors at the same steps."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from inspect_helpers import TinyCNN, TinyMLP, TinyTransformer, batch_for, direct, train_step  # noqa: E402
from torch import Tensor, nn  # noqa: E402

import memlens  # noqa: E402
from memlens.errors import MemlensError  # noqa: E402
from memlens.inspector import stats as S  # noqa: E402
from memlens.inspector.select import label, leaf_modules, select_modules  # noqa: E402
from memlens.inspector.store import Run, load_run  # noqa: E402

pytestmark = pytest.mark.torch


class Reference:
    """Records, with hooks of its own, the tensors the inspector should have seen."""

    def __init__(self, model: nn.Module, names: list[str], every: int) -> None:
        self.every = every
        self.step = 0
        self.seen: dict[tuple[int, str], Tensor] = {}
        self.model = model
        mods = dict(model.named_modules())
        for name in names:
            mods[name].register_forward_hook(self._hook(label(name)))

    def sampled(self) -> bool:
        return self.step % self.every == 0

    def _put(self, key: str, t: Tensor) -> None:
        self.seen.setdefault((self.step, key), t.detach().clone())

    def _hook(self, lab: str) -> Callable[[nn.Module, object, object], None]:
        def hook(m: nn.Module, args: object, out: object) -> None:
            if not self.sampled() or not isinstance(out, torch.Tensor):
                return
            self._put(f"{lab}:output", out)
            if out.requires_grad:
                out.register_hook(lambda g: self._put(f"{lab}:grad_output", g))

        return hook

    def params_and_grads(self) -> None:
        if self.sampled():
            for n, p in self.model.named_parameters():
                self._put(f"{n}:param", p)
                if p.grad is not None:
                    self._put(f"{n}:grad", p.grad)


def run_and_compare(
    model: nn.Module, tmp_path: Path, *, every: int = 2, steps: int = 7, **kw: Any
) -> tuple[Run, int]:
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    names = [n for n, _ in select_modules(model, None)]
    ref = Reference(model, names, every)
    out = tmp_path / "run"
    track = ("output", "grad_output", "param", "grad")
    with memlens.inspect(model, every=every, out=out, render="none", track=track, **kw) as ins:
        for _ in range(steps):
            x, y = batch_for(model, gen=gen)
            out_t = model(x)
            if out_t.dim() == 3:
                out_t, y = out_t.reshape(-1, out_t.shape[-1]), y.reshape(-1)
            loss = torch.nn.functional.cross_entropy(out_t, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            ref.params_and_grads()  # before the optimizer changes the parameters
            opt.step()
            ins.step()
            ref.step += 1
    assert ins.samples_dropped == 0
    run = load_run(out)
    assert run.meta["status"] == "complete"
    compared = 0
    for (step, key), t in ref.seen.items():
        assert key in run.tensors, f"{key} was not saved (have {sorted(run.tensors)[:8]}...)"
        s = run.tensors[key]
        i = s.steps.tolist().index(step)
        want = direct(t)
        for name in S.STAT_NAMES:
            got = s.stats[name][i]
            if math.isnan(want[name]):
                assert math.isnan(got), (key, step, name)
            else:
                assert got == pytest.approx(want[name], rel=1e-6, abs=1e-9), (key, step, name)
        assert s.shapes[i] == list(t.shape)
        assert int(s.hist[i].sum()) == t.numel()
        compared += 1
    sampled_steps = {st for st in range(steps) if st % every == 0}
    for s in run.tensors.values():
        assert set(s.steps.tolist()) <= sampled_steps
    return run, compared


@pytest.mark.parametrize("model_cls", [TinyMLP, TinyCNN, TinyTransformer])
@pytest.mark.parametrize("raw_max_numel", [None, 0], ids=["default", "reduced"])
def test_saved_statistics_equal_direct(model_cls, raw_max_numel, tmp_path):
    model = model_cls()
    run, compared = run_and_compare(model, tmp_path, raw_max_numel=raw_max_numel)
    assert compared >= 4 * 3  # several tensors at each of 4 sampled steps
    # every sampled step has activation bytes equal to the bytes of the module outputs
    steps = [r["step"] for r in run.activation_bytes]
    assert steps == [0, 2, 4, 6]
    ann = json.loads((run.path / "annotations.json").read_text())
    assert ann["format"] == "memlens.inspect.annotations/1" and ann["unit"] == "bytes"
    assert [s["step"] for s in ann["steps"]] == steps
    for row in ann["steps"]:
        assert row["total_bytes"] == sum(row["modules"].values()) > 0


def test_activation_bytes_are_output_bytes(tmp_path):
    model = TinyMLP()
    with memlens.inspect(model, every=1, out=tmp_path / "r", render="none") as ins:
        model(torch.randn(5, 12))
        ins.step()
    row = load_run(tmp_path / "r").activation_bytes[0]
    assert row["modules"] == {"fc1": 5 * 24 * 4, "act": 5 * 24 * 4, "fc2": 5 * 3 * 4}
    assert abs(row["time_us"] / 1e6 - time.time()) < 60
    # the forward pass ends at the last watched module's output, on the same clock
    assert row["time_us"] <= row["end_time_us"] < row["time_us"] + 60_000_000


def test_transformer_attention_is_a_leaf():
    names = [n for n, _ in leaf_modules(list(TinyTransformer().named_modules()))]
    assert "encoder.layers.0.self_attn" in names
    assert "encoder.layers.0.self_attn.out_proj" not in names
    assert "encoder.layers.1.linear2" in names


def test_layer_selection(tmp_path):
    m = TinyTransformer()
    assert [n for n, _ in select_modules(m, "encoder.layers.0")] == ["encoder.layers.0"]
    assert [n for n, _ in select_modules(m, "encoder.layers.*.linear1")] == [
        "encoder.layers.0.linear1",
        "encoder.layers.1.linear1",
    ]
    assert {type(x) for _, x in select_modules(m, torch.nn.LayerNorm)} == {torch.nn.LayerNorm}
    assert [n for n, _ in select_modules(m, lambda n, mod: n == "head")] == ["head"]
    with pytest.raises(MemlensError, match="did you mean"):
        select_modules(m, "encoder.layer.0")
    with pytest.raises(MemlensError):
        select_modules(m, torch.nn.Conv2d)


def test_selected_block_owns_its_parameters(tmp_path):
    m = TinyTransformer()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    with memlens.inspect(
        m, layers=["encoder.layers.0"], every=1, out=tmp_path / "r", render="none", track="all"
    ) as ins:
        train_step(m, opt, batch_for(m))
        ins.step()
    run = load_run(tmp_path / "r")
    keys = set(run.tensors)
    assert "encoder.layers.0:output" in keys and "encoder.layers.0:input.0" in keys
    assert "encoder.layers.0:grad_output" in keys and "encoder.layers.0:grad_input.0" in keys
    assert "encoder.layers.0.self_attn.out_proj.weight:param" in keys
    assert "encoder.layers.0.self_attn.out_proj.weight:grad" in keys
    assert not any(k.startswith("encoder.layers.1") or k.startswith("head") for k in keys)


def test_inplace_after_hooked_module_is_safe_by_default(tmp_path):
    """TinyCNN does `out += y` on bn2's output: full backward hooks would make torch raise."""
    m = TinyCNN()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    with memlens.inspect(
        m, every=1, out=tmp_path / "r", render="none", track=("output", "grad_output")
    ) as ins:
        for _ in range(2):
            train_step(m, opt, batch_for(m))
            ins.step()
    assert "bn2:grad_output" in load_run(tmp_path / "r").tensors


def test_full_backward_hooks(tmp_path):
    m = TinyMLP()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    with memlens.inspect(
        m,
        every=1,
        out=tmp_path / "r",
        render="none",
        backward="full",
        track=("grad_output", "grad_input"),
    ) as ins:
        x, y = batch_for(m)
        train_step(m, opt, (x.requires_grad_(), y))
        ins.step()
    keys = set(load_run(tmp_path / "r").tensors)
    assert {"fc2:grad_output.0", "fc2:grad_input.0", "act:grad_input.0", "fc1:grad_input.0"} <= keys


def test_counts_forward_calls_without_step(tmp_path):
    m = TinyMLP()
    with (
        memlens.inspect(m, every=3, out=tmp_path / "r", render="none", track="output") as ins,
        torch.no_grad(),
    ):
        for _ in range(7):
            m(torch.randn(2, 12))
    assert ins.last_forward_step == 6
    assert load_run(tmp_path / "r").tensors["fc1:output"].steps.tolist() == [0, 3, 6]


def test_max_per_second(tmp_path):
    m = TinyMLP()
    with memlens.inspect(
        m, every=None, max_per_second=2, out=tmp_path / "r", render="none", track="output"
    ) as ins:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.2:
            with torch.no_grad():
                m(torch.randn(2, 12))
            ins.step()
            time.sleep(0.01)
    n = len(load_run(tmp_path / "r").tensors["fc1:output"])
    assert 2 <= n <= 4


def test_full_queue_drops_and_never_blocks(tmp_path):
    m = TinyMLP(d_in=256, hidden=512)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    # A byte budget smaller than one sample: everything is dropped, and counted.
    with memlens.inspect(
        m, every=1, out=tmp_path / "r", render="none", max_queue_bytes=1000
    ) as ins:
        for _ in range(3):
            train_step(m, opt, (torch.randn(64, 256), torch.randint(0, 3, (64,))))
            ins.step()
    assert ins.samples_dropped > 0
    meta = load_run(tmp_path / "r").meta
    assert meta["dropped"] == ins.samples_dropped
    assert meta["status"] == "complete"


def test_bad_arguments(tmp_path):
    m = TinyMLP()
    with pytest.raises(MemlensError):
        memlens.inspect(m, every=0, out=tmp_path)
    with pytest.raises(MemlensError):
        memlens.inspect(m, track=("outputs",), out=tmp_path)
    with pytest.raises(TypeError):
        memlens.inspect(m, alerts={"no_such_rule": 1}, out=tmp_path)


def test_rerun_replaces_previous_files(tmp_path):
    m = TinyMLP()
    for n in (3, 1):
        with memlens.inspect(m, every=1, out=tmp_path / "r", render="none", track="output") as ins:
            for _ in range(n):
                with torch.no_grad():
                    m(torch.randn(2, 12))
                ins.step()
    assert len(load_run(tmp_path / "r").tensors["fc1:output"]) == 1

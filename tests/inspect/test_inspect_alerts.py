"""Alerts while training: printed once, with the module name and the step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import memlens  # noqa: E402
from memlens.inspector.alerts import AlertChecker  # noqa: E402
from memlens.inspector.api import Inspector  # noqa: E402
from memlens.inspector.store import load_run  # noqa: E402

pytestmark = pytest.mark.torch


class Faulty(nn.Module):
    """A small MLP that can be made to misbehave at a chosen step."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(32, 2)
        self.nan_from: int | None = None
        self.step = 0

    def forward(self, x):
        h = self.fc1(x)
        if self.nan_from is not None and self.step >= self.nan_from:
            h = h.clone()
            h[0, 0] = float("nan")
        return self.fc2(self.act(h))


def train(
    model: Faulty, ins: Inspector, steps: int, hook: Callable[[int], None] | None = None
) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        model.step = step
        if hook:
            hook(step)
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        if torch.isfinite(loss):
            opt.step()
        ins.step()


def alerts_of(out: Path, rule: str) -> list[dict[str, Any]]:
    return [a for a in load_run(out).alerts if a["rule"] == rule]


def test_nan_alert_once_with_module_and_step(tmp_path, capfd):
    m = Faulty()
    m.nan_from = 4
    out = tmp_path / "r"
    with memlens.inspect(
        m, every=2, out=out, render="none", track=("output", "grad_output", "param", "grad")
    ) as ins:
        train(m, ins, 10)
    err = capfd.readouterr().err
    # The NaN is made after fc1, so it first shows in act's output; it then spreads.
    lines = [ln for ln in err.splitlines() if "alert: NaN" in ln]
    assert "module 'act' (act:output) at step 4" in lines[0], err
    assert len([ln for ln in lines if "module 'act'" in ln]) == 1  # once per module
    nan = alerts_of(out, "nan")
    assert [a["key"] for a in nan if a["module"] == "act"] == ["act:output", "act:grad_output"]
    assert all(a["step"] == 4 for a in nan)
    assert not any(a["key"] == "fc1:output" for a in nan)
    assert alerts_of(out, "vanishing") == []  # a NaN gradient is not a vanishing one


def test_dead_activations(tmp_path, capfd):
    m = Faulty()
    with torch.no_grad():
        m.fc1.bias.fill_(-100.0)
    out = tmp_path / "r"
    with memlens.inspect(m, every=1, out=out, render="none") as ins:
        train(m, ins, 3)
    dead = alerts_of(out, "dead")
    assert [a["key"] for a in dead] == ["act:output"] and dead[0]["step"] == 0
    assert "alert: dead activations in module 'act'" in capfd.readouterr().err


def test_exploding_norm(tmp_path):
    m = Faulty()
    out = tmp_path / "r"

    def blow_up(step):
        if step == 4:
            with torch.no_grad():
                m.fc2.weight.mul_(1e5)

    with memlens.inspect(m, every=1, out=out, render="none", track=("param", "output")) as ins:
        train(m, ins, 6, blow_up)
    keys = {(a["key"], a["step"]) for a in alerts_of(out, "exploding")}
    assert ("fc2.weight:param", 4) in keys


def test_vanishing_gradient(tmp_path):
    m = Faulty()
    out = tmp_path / "r"

    def vanish(step):
        if step == 3:
            with torch.no_grad():
                m.fc2.weight.zero_()  # nothing flows back into fc1 or act any more

    with memlens.inspect(m, every=1, out=out, render="none", track=("grad_output", "grad")) as ins:
        train(m, ins, 5, vanish)
    got = {(a["key"], a["step"]) for a in alerts_of(out, "vanishing")}
    assert ("fc1.weight:grad", 3) in got and ("act:grad_output", 3) in got


def test_checker_fires_each_rule_once():
    c = AlertChecker()
    s = {"nan": 2, "inf": 0, "norm": 1.0, "frac_zeros": 0.0}
    assert [a["rule"] for a in c.check("k", "m", "output", 0, 10, s)] == ["nan"]
    assert c.check("k", "m", "output", 1, 10, s) == []
    big = {"nan": 0, "inf": 0, "norm": 1e6, "frac_zeros": 0.0}
    assert [a["rule"] for a in c.check("k", "m", "output", 2, 10, big)] == ["exploding"]

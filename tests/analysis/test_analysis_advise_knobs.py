"""`memlens advise`'s checkpoint and autocast findings (analysis/advise_knobs.py) on a
hand-built training step that has them and on variants that do not; figures by hand."""

from __future__ import annotations

from typing import Any

import pytest

import memlens
from memlens.analysis.advise import advise
from memlens.planning.verify import knob_for
from snapshot_builders import MiB, block, ev, segment

S1 = 0x10000000


def fwd(line: int) -> list[dict[str, Any]]:
    return [{"filename": "/home/u/model.py", "line": line, "name": "forward"}]


BWD = [{"filename": "??", "line": 0, "name": "torch::autograd::Engine::evaluate_function(x)"}]
USER = [{"filename": "/home/u/train.py", "line": 7, "name": "step"}]
CAST = {"filename": "??", "line": 0, "name": "at::autocast::cached_cast(x)"}


def step(weight: int = 2 * MiB, backward: bool = True, autocast: bool = False,
         teardown: bool = False) -> dict[str, Any]:  # fmt: skip
    """A `weight` parameter W (alive before and after the trace) at S1, then: A1 4 MiB
    (model.py:20), a 1 MiB temporary T (model.py:22) made and freed, A2 2 MiB (model.py:21),
    B 1 MiB made by the autograd engine (event 4: the peak, W + 7 MiB live), then A2, A1
    and B freed. A1 and A2 are freed after a backward event: activations, 6 MiB at the
    peak. Without `backward` B is made by user code: nothing is saved for backward. With
    `teardown` a 1 MiB P (train.py) is made first and freed by user code after the last
    backward event, as a script's model when its main() returns: not an activation."""
    a1, t, a2, b, p = (S1 + weight + o * MiB for o in (0, 4, 5, 7, 8))
    later = BWD if backward else USER
    trace = [
        ev("alloc", a1, 4 * MiB, 0, frames=fwd(20) + ([CAST] if autocast else [])),
        ev("alloc", t, MiB, 1, frames=fwd(22)),
        ev("free_completed", t, MiB, 2, frames=fwd(22)),
        ev("alloc", a2, 2 * MiB, 3, frames=fwd(21)),
        ev("alloc", b, MiB, 4, frames=later),
        ev("free_completed", a2, 2 * MiB, 5, frames=later),
        ev("free_completed", a1, 4 * MiB, 6, frames=later),
        ev("free_completed", b, MiB, 7, frames=later),
    ]
    if teardown:
        trace = [ev("alloc", p, MiB, 0, frames=USER), *trace,
                 ev("free_completed", p, MiB, 8, frames=USER)]  # fmt: skip
    blocks = [block(S1, weight, weight, "active_allocated", USER),
              block(a1, 8 * MiB, 0, "inactive")]  # fmt: skip
    return {"segments": [segment(S1, blocks, segment_type="large")], "device_traces": [trace]}


@pytest.mark.parametrize("teardown", [False, True], ids=["", "freed-after-the-step"])
def test_activations_at_the_peak_give_checkpoint_and_autocast_findings(teardown):
    """Checkpoint: A1 + A2 = 6 MiB, by site (P, live at the peak, is not counted).
    Autocast (no autocast frame): half the 6 MiB of activations less half the 2 MiB
    weight = 3 - 1 = 2 MiB, wired to autocast=bf16; with P, a parameter freed after the
    step, half of 2 + 1 MiB: 3 MiB - 1.5 MiB = 1.5 MiB."""
    dev = memlens.load(step(teardown=teardown)).device(0)
    peak = (10 * MiB, 5) if teardown else (9 * MiB, 4)
    assert (dev.peak_active_bytes, dev.peak_event_index) == peak
    ckpt, cast = advise(dev)["findings"]
    assert (ckpt["kind"], ckpt["bytes"], ckpt["certainty"]) == ("checkpoint", 6 * MiB, "estimate")
    assert [(s["site"], s["bytes"]) for s in ckpt["sites"]] == [
        ("forward (/home/u/model.py:20)", 4 * MiB), ("forward (/home/u/model.py:21)", 2 * MiB)]  # fmt: skip
    # /home/u/model.py is not on this machine: the class is not named, the site is
    assert "the module of forward (/home/u/model.py:20): --source-root DIR" in ckpt["summary"]
    assert ckpt["knob"] is None and "put your repeated block's class" in ckpt["change"]
    saved, copies = ("1.50 MiB", "1.50 MiB") if teardown else ("2.00 MiB", "1.00 MiB")
    assert (cast["kind"], cast["bytes"], cast["certainty"]) == (
        "autocast", (3 * MiB) // 2 if teardown else 2 * MiB, "estimate")  # fmt: skip
    assert f"about {saved}" in cast["summary"] and f"{copies} of bf16 weight" in cast["summary"]
    assert knob_for(cast)[:2] == ("autocast=bf16", "active")
    # --script tests an unnamed class on the script's largest repeated module class
    assert knob_for(ckpt) == ("checkpoint=auto", "active", "")


@pytest.mark.parametrize(
    ("kwargs", "kinds"),
    [
        ({"backward": False}, []),  # forward only: no activation saved for backward
        ({"autocast": True}, ["checkpoint"]),  # already under autocast
        ({"weight": 6 * MiB}, ["checkpoint"]),  # 3 MiB halved < 3 MiB of weight casts
    ],
    ids=["forward-only", "under-autocast", "weights-outweigh"],
)
def test_no_finding_without_them(kwargs, kinds):
    dev = memlens.load(step(**kwargs)).device(0)
    assert [f["kind"] for f in advise(dev)["findings"]] == kinds

"""Steps from repetition alone, on traces recorded without stacks: hand-built loops with
their exact step boundaries, the shared CNN recording and a tiled full step with their
stacks dropped, and what must not be taken for steps (a steady forward pass, growing
layers, the same repetition where stacks show no training)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import memlens
from memlens import DeviceTrace
from memlens.analysis.inferred_steps import inferred_stages
from memlens.analysis.leaks import leaks
from memlens.analysis.stages import stage_intervals, stage_table
from snapshot_builders import MiB, block, ev, segment

S = 0x100000
X, Y, Z, W, STATE = S + 0x400, S + 0x800, S + 0xC00, S + 0x1000, S + 0x1400
UNIT = ((X, 400), (Y, 200), (Z, 100), (W, 50))  # one step's allocations, freed in reverse


def loop_trace(
    steps: int, *, frames: list[dict[str, Any]] | None = None, cut: int = 0
) -> list[dict[str, Any]]:
    """`steps` steps of 4 allocations (12 events: alloc X Y Z W, then each freed in reverse
    with free_requested + free_completed... as written below), step 1 also allocating the
    optimizer state (300 B, alive to the end) after its frees; then `cut` allocations of
    one more step that the recording stopped in."""
    f = [] if frames is None else frames
    out: list[dict[str, Any]] = []
    for k in range(steps):
        for addr, size in UNIT:
            out.append(ev("alloc", addr, size, len(out), frames=f))
        for addr, size in reversed(UNIT):
            out.append(ev("free_requested", addr, size, len(out), frames=f))
        for addr, size in reversed(UNIT):
            out.append(ev("free_completed", addr, size, len(out), frames=f))
        if k == 0:
            out.append(ev("alloc", STATE, 300, len(out), frames=f))
    for addr, size in UNIT[:cut]:
        out.append(ev("alloc", addr, size, len(out), frames=f))
    return out


def loop_snapshot(steps: int, **kw: Any) -> dict[str, Any]:
    cut = kw.get("cut", 0)
    live = [block(addr, 1024, size, "active_allocated", []) for addr, size in UNIT[:cut]]
    freed = [block(addr, 1024, 1024, "inactive") for addr, _ in UNIT[cut:]]
    blocks = [block(S, 1024, 1000, "active_allocated", [])]  # a parameter: 1000 B before
    blocks += live + freed + [block(STATE, 1024, 300, "active_allocated", [])]
    blocks.append(block(S + 0x1800, MiB - 0x1800, MiB - 0x1800, "inactive"))
    blocks.sort(key=lambda b: b["address"])
    return {"segments": [segment(S, blocks)], "device_traces": [loop_trace(steps, **kw)]}


def steps_of(dev) -> list[tuple[str, int, int, bool]]:
    return [(s.name, s.first_event, s.last_event, s.open_end) for s in inferred_stages(dev)]


def test_a_stackless_loop_is_cut_where_memory_is_lowest():
    dev = memlens.load(loop_snapshot(5)).device(0)
    # active bytes: 1000 before; a step rises to 1750 and falls back; step 1 leaves the
    # 300 B state, so every later step starts (and ends) at 1300, its lowest point, just
    # before its first allocation. Step 1: events 0..12 (12 + the state); then 12 each.
    assert steps_of(dev) == [
        ("step#1", 0, 12, False),
        ("step#2", 13, 24, False),
        ("step#3", 25, 36, False),
        ("step#4", 37, 48, False),
        ("step#5", 49, 60, False),
    ]
    # no phases: without stacks forward, backward and optimizer look alike
    assert all(s["depth"] == 0 and s["inferred"] for s in stage_intervals(dev))
    notes = stage_table(dev, top=0)["notes"]
    assert notes[-1] == (
        "no step annotations: 5 steps inferred from the repetition of the allocation "
        "sequence alone (no stacks were recorded): step#N (inferred), without phases"
    )
    (g,) = leaks(dev)["groups"]
    assert (g["base_name"], g["count"], g["first_only_bytes"]) == ("step", 5, 300)


def test_the_recording_stopped_inside_a_step():
    dev = memlens.load(loop_snapshot(5, cut=2)).device(0)  # X and Y of a sixth step
    assert steps_of(dev)[-2:] == [("step#5", 49, 60, False), ("step#6", 61, 62, True)]


def test_growth_and_small_swings_are_not_steps():
    # a forward pass with autograd: every repeat keeps what it allocated (no frees)
    grow = [ev("alloc", S + 0x400 * k, 100 + k % 4, k, frames=[]) for k in range(40)]
    blocks = [block(S + 0x400 * k, 1024, 100 + k % 4, "active_allocated", []) for k in range(40)]
    blocks.append(block(S + 0xA000, MiB - 0xA000, MiB - 0xA000, "inactive"))
    snap: dict[str, Any] = {"segments": [segment(S, blocks)], "device_traces": [grow]}
    assert inferred_stages(memlens.load(snap).device(0)) == []
    # inference: a loop whose temporaries are small beside what stays (10,000,000 B)
    snap = loop_snapshot(5)
    snap["segments"][0]["blocks"][0]["requested_size"] = 10_000_000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the parameter is larger than its block
        dev = memlens.load(snap).device(0)
    assert dev.baseline_bytes == 10_000_000 and inferred_stages(dev) == []


def test_with_stacks_repetition_alone_is_no_training():
    frames = [{"filename": "/home/u/serve.py", "line": 7, "name": "predict"}]
    assert inferred_stages(memlens.load(loop_snapshot(5, frames=frames)).device(0)) == []


def _stackless(path: Path) -> DeviceTrace:
    if not path.exists():
        pytest.skip(f"{path.name} is absent")
    with path.open("rb") as fh:
        raw = pickle.load(fh)  # the shared, trusted recording: plain dicts and lists
    for trace in raw["device_traces"]:
        for e in trace:
            e.pop("frames", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return memlens.load(raw).device()


def test_the_cnn_without_its_stacks(shared_snapshots_dir):
    dev = _stackless(shared_snapshots_dir / "eor_nn_train.pickle")
    got = steps_of(dev)
    # ten steps (193 allocations each after the first, which has 5 more), as with
    # stacks; each starts 3 events later than the optimizer-based step: the frees after
    # the optimizer call and a `snapshot` entry end the previous step, before the first
    # allocation, where the loop's memory is lowest
    assert [(a, b) for _, a, b, _ in got] == [
        (0, 582), (583, 1163), (1164, 1743), (1744, 2323), (2324, 2903), (2904, 3483),
        (3484, 4063), (4064, 4643), (4644, 5223), (5224, 5802),
    ]  # fmt: skip
    with_stacks = memlens.load(shared_snapshots_dir / "eor_nn_train.pickle").device()
    by_optimizer = [s.first_event for s in inferred_stages(with_stacks) if s.depth == 0]
    assert [a for _, a, _, _ in got[1:]] == [f + 3 for f in by_optimizer[1:]]
    assert not any(o for *_, o in got)


@pytest.mark.parametrize("name", ["wedson_medium_128_inference", "cs336_memory_ctx128_forward",
                                  "cs336_compiled_ctx128_forward"])  # fmt: skip
def test_forward_passes_without_stacks_have_no_steps(shared_snapshots_dir, name):
    # their layers (and the autotuner's runs) repeat exactly, but a forward pass with
    # autograd grows at every layer, an inference layer's temporaries are 1% of what stays
    assert inferred_stages(_stackless(shared_snapshots_dir / f"{name}.pickle")) == []


def test_a_tiled_full_step_without_its_stacks(shared_snapshots_dir, tmp_path):
    tool = shared_snapshots_dir.parent / "tools" / "tile_snapshot.py"
    src = shared_snapshots_dir / "cs336_memory_ctx128_fullstep.pickle"
    if not (tool.exists() and src.exists()):
        pytest.skip("the shared full step or its tiling tool is absent")
    out = tmp_path / "fullstep3.pickle"
    subprocess.run([sys.executable, str(tool), str(src), str(out), "-n", "3"], check=True)
    got = steps_of(_stackless(out))
    # three times the 19,342 events of the step, each after the first preceded by the
    # 1,755 events that return to the starting state (freeing what the step left alive):
    # they end the step before, whose memory is lowest right after them
    assert got == [
        ("step#1", 0, 21096, False),
        ("step#2", 21097, 42192, False),
        ("step#3", 42193, 61533, False),
    ]

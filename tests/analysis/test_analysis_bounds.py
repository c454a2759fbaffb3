"""Issue 33 item 4: analysis time bounded by the trace, not by what a small file can ask for.

Two files of the issue, built here: 200,000 stackless allocations of one size (steps are
searched for by repetition: every distance is a candidate period, and a period of one
allocation made 200,000 steps, each a pass of its own: 71 s in `stages`), and 300,000
annotations (a stage each: 79 s and 1.1 GB). The period search jumps between boundaries
and tries no period that makes more than 10,000 steps; more stages than the 'stages' limit
(snapshot/limits.py) are refused with the limit's one line. CPU time is measured (the
machine is shared), with a generous bound."""

from __future__ import annotations

import pickle
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import memlens
from memlens.analysis.leaks import leaks
from memlens.analysis.repeated_steps import _boundaries
from memlens.analysis.stages import stage_intervals, stages_output
from memlens.snapshot.limits import LimitExceeded

BOUND_S = 20.0  # CPU seconds per command; the cases took 71-211 s


def _stackless(n: int) -> dict[str, Any]:
    """`n` allocations of 512 bytes without stacks, each freed before the next."""
    events: list[dict[str, Any]] = []
    for i in range(n):
        addr = 0x7F00_0000_0000 + 512 * i
        for k, action in enumerate(("alloc", "free_completed")):
            events.append({"action": action, "addr": addr, "size": 512, "stream": 0,
                           "time_us": 2 * i + k, "frames": []})  # fmt: skip
    return {"segments": [], "device_traces": [events]}


def _annotated(pairs: int) -> dict[str, Any]:
    """A short trace and `pairs` START/END annotations, each its own stage."""
    events = [
        {"action": "alloc", "addr": 0x7F00_0000_0000 + 512 * i, "size": 512, "stream": 0,
         "time_us": 10 * i, "frames": []}
        for i in range(20)
    ]  # fmt: skip
    ann = [
        {"stage": stage, "name": f"s{i}", "device": 0, "time_us": i}
        for i in range(pairs)
        for stage in ("START", "END")
    ]
    return {"segments": [], "device_traces": [events], "external_annotations": ann}


def _cpu(fn: Any, *args: Any) -> tuple[Any, float]:
    """fn(*args) or the LimitExceeded it raised, and the CPU seconds it took."""
    t0 = time.process_time()
    try:
        out: Any = fn(*args)
    except LimitExceeded as exc:
        out = exc
    return out, time.process_time() - t0


def _cli_cpu(path: Path, command: str) -> tuple[subprocess.CompletedProcess[str], float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-m", "memlens", command, "--no-cache", str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return done, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_boundaries_keep_occurrences_a_period_apart() -> None:
    import numpy as np

    occ = np.array([0, 1, 2, 5, 6, 9, 10, 11, 15])
    assert _boundaries(occ, 1) == occ.tolist()
    assert _boundaries(occ, 3) == [0, 5, 9, 15]
    assert _boundaries(occ, 5) == [0, 5, 10, 15]
    assert _boundaries(occ, 100) == [0]


@pytest.fixture(scope="module")
def stackless_dev() -> Any:
    return memlens.load(_stackless(200_000)).device(0)


def test_stackless_allocations_of_one_size_stages_and_leaks(stackless_dev: Any) -> None:
    out, cpu = _cpu(stages_output, stackless_dev)
    assert cpu < BOUND_S, cpu
    # a period that makes more than MAX_STEPS steps is not tried
    assert not isinstance(out, LimitExceeded), out
    assert 0 < len(out["stages"]) <= 10_000
    out, cpu = _cpu(leaks, stackless_dev)
    assert cpu < BOUND_S, cpu


def test_stackless_allocations_of_one_size_advise(tmp_path: Path) -> None:
    p = tmp_path / "stackless.pickle"
    p.write_bytes(pickle.dumps(_stackless(200_000), protocol=4))
    done, cpu = _cli_cpu(p, "advise")
    assert done.returncode == 0, done.stderr[-2000:]
    assert cpu < 3 * BOUND_S, cpu  # three allocator replays of 400,000 events, in Python


def test_three_hundred_thousand_annotations_are_the_stages_limit() -> None:
    dev = memlens.load(_annotated(150_000)).device(0)
    for analysis in (stages_output, leaks, stage_intervals):
        out, cpu = _cpu(analysis, dev)
        assert cpu < BOUND_S, (analysis.__name__, cpu)
        assert isinstance(out, LimitExceeded) and out.name == "stages", out
        assert "more than 100,000 stages" in str(out) and "--limit stages=400000" in str(out)


def test_the_stages_limit_is_one_line_in_the_cli(tmp_path: Path) -> None:
    p = tmp_path / "ann.pickle"
    p.write_bytes(pickle.dumps(_annotated(150_000), protocol=4))
    for command in ("stages", "leaks"):
        done, cpu = _cli_cpu(p, command)
        assert done.returncode == 2 and cpu < BOUND_S, (command, cpu, done.stderr[-2000:])
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memlens: error: stopped: more than")
        assert "'stages' limit" in lines[0]


def test_the_stages_limit_can_be_set(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = memlens.load(_annotated(6)).device(0)
    monkeypatch.setenv("MEMLENS_MAX_STAGES", "5")
    out, _ = _cpu(stage_intervals, dev)
    assert isinstance(out, LimitExceeded) and "more than 5 stages" in str(out)
    for allowed in ("6", "0"):  # 0: no limit
        monkeypatch.setenv("MEMLENS_MAX_STAGES", allowed)
        assert [s["name"] for s in stage_intervals(dev)] == [f"s{i}" for i in range(6)]

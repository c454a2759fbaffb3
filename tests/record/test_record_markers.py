"""memlens.stage and memlens.step are real record_function ranges (checked with torch's CPU
profiler, which sees the same ranges the CUDA snapshot stores in external_annotations)."""

from __future__ import annotations

import pytest
import record_fixtures

import memlens
from memlens.capture import markers
from memlens.capture.errors import RecordError

_clean = pytest.fixture(autouse=True)(record_fixtures.clean_capture_state)

torch = pytest.importorskip("torch")


def _range_names(prof) -> list[str]:
    return [e.name for e in prof.events() if e.name.startswith(("fwd", "opt", "memlens."))]


def test_stage_as_context_manager_and_decorator():
    @memlens.stage("opt")
    def update(x: int) -> int:
        return x + 1

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with memlens.stage("fwd"):
            torch.ones(4) * 2
        assert update(1) == 2
        assert update(2) == 3
    assert sorted(_range_names(prof)) == ["fwd", "opt", "opt"]
    assert update.__name__ == "update"


def test_stage_can_be_reentered(monkeypatch):
    # The profiler folds nested ranges of one name together, so watch the ranges directly.
    log: list[tuple[str, int]] = []

    class Range:
        def __init__(self, name):
            self.name, self.id = name, len(log)

        def __enter__(self):
            log.append(("enter", self.id))

        def __exit__(self, *exc):
            log.append(("exit", self.id))

    monkeypatch.setattr(markers, "record_function", Range)
    s = memlens.stage("fwd")

    @s
    def down(n: int) -> int:
        return 0 if n == 0 else 1 + down(n - 1)

    assert down(2) == 2
    assert log == [
        ("enter", 0),
        ("enter", 1),
        ("enter", 2),
        ("exit", 2),
        ("exit", 1),
        ("exit", 0),
    ]


def test_stage_closes_on_exception():
    cpu = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    with cpu as prof, pytest.raises(ZeroDivisionError), memlens.stage("fwd"):
        raise ZeroDivisionError
    assert _range_names(prof) == ["fwd"]


def test_stage_needs_a_name():
    with pytest.raises(RecordError, match="needs a non-empty name"):
        memlens.stage("")


def test_step_numbers_markers_and_hooks():
    seen: list[int] = []
    remove = markers.add_step_hook(seen.append)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        assert memlens.step() == 1
        assert memlens.step() == 2
    remove()
    assert memlens.step() == 3
    assert seen == [1, 2]
    assert _range_names(prof) == ["memlens.step#1", "memlens.step#2"]

"""TorchCudaBackend against the installed torch: the private APIs it calls exist with the
parameters it passes, and it passes them as intended (torch's CUDA entry points are
replaced by recorders here, since this machine has no GPU)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import record_fixtures

import memlens
from memlens.capture.backend import TorchCudaBackend

_clean = pytest.fixture(autouse=True)(record_fixtures.clean_capture_state)

torch = pytest.importorskip("torch")


def test_record_memory_history_takes_the_arguments_memlens_passes():
    params = inspect.signature(torch.cuda.memory._record_memory_history).parameters
    assert {"enabled", "context", "stacks", "max_entries"} <= set(params)
    assert callable(torch.cuda.memory._snapshot)


@pytest.fixture
def torch_calls(monkeypatch):
    calls: list[tuple[object, ...]] = []
    snapshot: dict[str, list[Any]] = {
        "segments": [],
        "device_traces": [[]],
        "external_annotations": [],
    }

    history = [False]  # as torch: on from enabled="all" until enabled=None

    def record_memory_history(enabled="all", **kwargs):
        calls.append(("_record_memory_history", enabled, kwargs))
        history[0] = enabled is not None

    def take_snapshot():
        calls.append(("_snapshot",))
        return snapshot

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", lambda: calls.append(("init",)))
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", record_memory_history)
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", take_snapshot)
    monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled", lambda: history[0], raising=False)
    return calls


def test_record_drives_torch_in_order(torch_calls, tmp_path):
    with memlens.record(tmp_path / "s.pickle", max_entries=123, stacks="all", report=False):
        pass
    assert torch_calls == [
        ("init",),
        (
            "_record_memory_history",
            "all",
            {"context": "all", "stacks": "all", "max_entries": 123},
        ),
        ("init",),  # asking whether history is still on (other code may switch it off)
        ("_snapshot",),
        ("_record_memory_history", None, {}),
    ]
    assert memlens.load(tmp_path / "s.pickle").device(0).n_events == 0


def test_history_enabled_by_other_code_is_detected(torch_calls, monkeypatch, tmp_path):
    monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled", lambda: True, raising=False)
    refused = pytest.raises(memlens.MemlensError, match="already being recorded")
    with refused, memlens.record(tmp_path / "s.pickle"):
        pass
    assert torch_calls == [("init",)]


def test_without_the_probe_recorded_events_tell(torch_calls, monkeypatch):
    monkeypatch.delattr(torch._C, "_cuda_isHistoryEnabled", raising=False)
    assert TorchCudaBackend().history_enabled() is None  # no events: cannot tell
    event = {"action": "alloc", "addr": 1, "size": 512, "stream": 0}
    monkeypatch.setattr(
        torch.cuda.memory, "_snapshot", lambda: {"segments": [], "device_traces": [[], [event]]}
    )
    assert TorchCudaBackend().history_enabled() is True


def test_oom_observer_is_attached_through_torch(torch_calls, monkeypatch):
    attached: list[object] = []
    monkeypatch.setattr(
        torch._C, "_cuda_attach_out_of_memory_observer", attached.append, raising=False
    )
    TorchCudaBackend().attach_oom_observer(print)
    assert attached == [print]

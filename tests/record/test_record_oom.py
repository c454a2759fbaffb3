"""memlens.dump_on_oom against the fake backend, and the real backend's errors on CPU torch."""

from __future__ import annotations

import logging
import os

import pytest
import record_fixtures
from record_fake_backend import FakeBackend, FakeOutOfMemoryError, read_snapshot_file

import memlens
from memlens.capture import backend as backend_mod
from memlens.capture.errors import NoCudaError, RecordError

_clean = pytest.fixture(autouse=True)(record_fixtures.clean_capture_state)
fake = pytest.fixture(record_fixtures.fake_backend)

GiB = 2**30


def _oom(fake: FakeBackend, size: int) -> None:
    with pytest.raises(FakeOutOfMemoryError):
        fake.oom(size)


def test_first_oom_is_dumped_with_its_oom_entry(fake, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="memlens.record")
    handle = memlens.dump_on_oom(tmp_path / "ooms")
    assert fake.calls == [("start", 100_000, "python", "all"), ("attach_oom_observer",)]
    fake.alloc(4096)
    _oom(fake, 3 * GiB)
    _oom(fake, 5 * GiB)  # once per process by default
    expected = tmp_path / "ooms" / f"oom_pid{os.getpid()}_1.pickle"
    assert handle.paths == [expected]
    assert sorted(p.name for p in expected.parent.iterdir()) == [expected.name]
    trace = read_snapshot_file(expected)["device_traces"][0]
    assert [e["action"] for e in trace] == ["segment_alloc", "alloc", "oom"]
    assert trace[-1]["size"] == 3 * GiB
    message = caplog.records[-1].getMessage()
    assert "CUDA out of memory on device 0 (tried to allocate 3.00 GiB" in message
    assert f"snapshot written to {expected}" in message
    assert f"memlens view {expected}" in message
    handle.close()
    assert fake.calls[-1] == ("stop",)  # the recording dump_on_oom started is stopped
    _oom(fake, GiB)
    assert handle.paths == [expected]


def test_every_oom_with_once_false_and_rank_in_name(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    handle = memlens.dump_on_oom(tmp_path, once=False)
    _oom(fake, GiB)
    _oom(fake, GiB)
    pid = os.getpid()
    assert [p.name for p in handle.paths] == [
        f"oom_rank3_pid{pid}_1.pickle",
        f"oom_rank3_pid{pid}_2.pickle",
    ]
    handle.close()


def test_observer_attached_once_per_backend(fake, tmp_path):
    first = memlens.dump_on_oom(tmp_path / "a")
    second = memlens.dump_on_oom(tmp_path / "b", record=False)
    assert fake.named_calls().count("attach_oom_observer") == 1
    _oom(fake, GiB)
    assert len(first.paths) == 1 and len(second.paths) == 1
    second.close()
    first.close()


def test_record_false_leaves_recording_alone(fake, tmp_path):
    with memlens.dump_on_oom(tmp_path, record=False):
        pass
    assert fake.named_calls() == ["attach_oom_observer"]


def test_unsupported_observer_is_a_clear_error_and_undoes_recording(tmp_path):
    fake = FakeBackend(oom_supported=False)
    backend_mod.set_backend(fake)
    with pytest.raises(RecordError, match="no out-of-memory observer"):
        memlens.dump_on_oom(tmp_path)
    assert fake.named_calls() == ["start", "attach_oom_observer", "stop"]


def test_cpu_only_torch(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoCudaError):
        memlens.dump_on_oom(tmp_path)
    if not hasattr(torch._C, "_cuda_attach_out_of_memory_observer"):
        with pytest.raises(RecordError, match="_cuda_attach_out_of_memory_observer"):
            backend_mod.TorchCudaBackend().attach_oom_observer(lambda *a: None)

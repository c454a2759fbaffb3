"""memlens.record: call order against a recording fake backend, files, errors."""

from __future__ import annotations

import logging
import sys
import types
from collections.abc import Callable

import pytest
import record_fixtures
from record_fake_backend import SEGMENT_ADDRESS, FakeBackend, read_snapshot_file

import memlens
from memlens.capture import backend as backend_mod
from memlens.capture.errors import (
    NO_CUDA_MESSAGE,
    NoCudaError,
    RecordError,
    RecordingActiveError,
    UnwritablePathError,
)

_clean = pytest.fixture(autouse=True)(record_fixtures.clean_capture_state)
fake = pytest.fixture(record_fixtures.fake_backend)

MiB = 2**20
DEFAULT_START = ("start", 100_000, "python", "all")


def test_block_starts_dumps_then_stops(fake, tmp_path):
    out = tmp_path / "step.pickle"
    with memlens.record(out, report=False) as rec:
        a = fake.alloc(1 * MiB)
        fake.alloc(2 * MiB)
        fake.free(a)
        assert fake.calls == [DEFAULT_START]
    assert fake.calls == [DEFAULT_START, ("snapshot",), ("stop",)]
    assert rec.snapshot_path == out
    snap = read_snapshot_file(out)
    actions = [(e["action"], e.get("size")) for e in snap["device_traces"][0]]
    assert actions == [
        ("segment_alloc", 20 * MiB),
        ("alloc", 1 * MiB),
        ("alloc", 2 * MiB),
        ("free_requested", 1 * MiB),
        ("free_completed", 1 * MiB),
    ]
    seg = snap["segments"][0]
    assert seg["address"] == SEGMENT_ADDRESS
    assert [(b["size"], b["state"]) for b in seg["blocks"]] == [
        (1 * MiB, "inactive"),
        (2 * MiB, "active_allocated"),
        (17 * MiB, "inactive"),
    ]
    # recording is off again, and its history gone with it, as with torch
    assert fake.recording is None and fake.trace == []


def test_snapshot_reads_back_with_memlens_load(fake, tmp_path):
    out = tmp_path / "step.pickle"
    fake.alloc(1 * MiB)  # before recording: part of the baseline
    with memlens.record(out, report=False):
        a = fake.alloc(2 * MiB)
        fake.alloc(4 * MiB)
        fake.free(a)
    dev = memlens.load(out).device(0)
    assert dev.baseline_bytes == 1 * MiB
    assert dev.peak_active_bytes == 7 * MiB
    assert dev.peak_reserved_bytes == 20 * MiB
    assert dev.n_events == 4


def test_settings_are_passed_through(fake, tmp_path):
    with memlens.record(
        tmp_path / "s.pickle", max_entries=7, stacks="all", context="alloc", report=False
    ):
        pass
    assert fake.calls[0] == ("start", 7, "all", "alloc")


def test_dump_happens_when_the_block_raises(fake, tmp_path):
    out = tmp_path / "boom.pickle"
    with pytest.raises(KeyError, match="boom"), memlens.record(out, report=False):
        fake.alloc(MiB)
        raise KeyError("boom")
    assert fake.calls == [DEFAULT_START, ("snapshot",), ("stop",)]
    assert [e["action"] for e in read_snapshot_file(out)["device_traces"][0]] == [
        "segment_alloc",
        "alloc",
    ]


def test_decorator_records_each_call_afresh(fake, tmp_path):
    out = tmp_path / "fn.pickle"

    @memlens.record(out, report=False)
    def train_step(n: int) -> int:
        """Docstring kept."""
        fake.alloc(n)
        return n * 2

    assert train_step.__name__ == "train_step"
    assert train_step.__doc__ == "Docstring kept."
    assert train_step(512) == 1024
    assert train_step(1024) == 2048
    assert fake.calls == [DEFAULT_START, ("snapshot",), ("stop",)] * 2
    # the second call overwrote the file with its own history only
    assert [(e["action"], e["size"]) for e in read_snapshot_file(out)["device_traces"][0]] == [
        ("alloc", 1024)
    ]


def test_nested_record_restores_the_enclosing_settings(fake, tmp_path):
    outer, inner = tmp_path / "outer.pickle", tmp_path / "inner.pickle"
    with memlens.record(outer, max_entries=50, report=False):
        fake.alloc(MiB)
        with memlens.record(inner, max_entries=10, stacks="all", report=False):
            fake.alloc(MiB)
        fake.alloc(MiB)
    assert fake.calls == [
        ("start", 50, "python", "all"),
        ("start", 10, "all", "all"),
        ("snapshot",),
        ("start", 50, "python", "all"),  # put back, not stopped: history is kept
        ("snapshot",),
        ("stop",),
    ]
    assert len(read_snapshot_file(inner)["device_traces"][0]) == 3
    assert len(read_snapshot_file(outer)["device_traces"][0]) == 4


def test_same_object_cannot_be_entered_twice(fake, tmp_path):
    rec = memlens.record(tmp_path / "x.pickle", report=False)
    with rec, pytest.raises(RecordError, match="already recording"), rec:
        pass
    assert fake.named_calls() == ["start", "snapshot", "stop"]


def test_no_cuda_is_a_clear_error_before_anything_happens(tmp_path):
    fake = FakeBackend(available=False)
    backend_mod.set_backend(fake)
    out = tmp_path / "new" / "x.pickle"
    with pytest.raises(NoCudaError) as info, memlens.record(out):
        pytest.fail("the block must not run")
    assert str(info.value) == NO_CUDA_MESSAGE
    assert fake.calls == []
    assert not out.parent.exists()


def test_cpu_only_torch_gives_the_no_cuda_error(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(NoCudaError) as info, memlens.record(tmp_path / "x.pickle"):
        pytest.fail("the block must not run")
    assert str(info.value) == (
        "CUDA is not available: recording a snapshot needs a GPU; "
        "use `memlens simulate` to predict the snapshot without one"
    )
    assert isinstance(info.value, memlens.MemlensError)


def test_recording_started_elsewhere_is_refused(tmp_path):
    fake = FakeBackend(history=True)
    backend_mod.set_backend(fake)
    refused = pytest.raises(RecordingActiveError, match="already being recorded by code outside")
    with refused, memlens.record(tmp_path / "x.pickle"):
        pytest.fail("the block must not run")
    assert fake.calls == []


def test_parent_folders_are_created(fake, tmp_path):
    out = tmp_path / "a" / "b" / "c.pickle"
    with memlens.record(out, report=False):
        pass
    assert out.is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["c.pickle"]  # no temp files left


def test_unwritable_path_is_refused_before_recording(fake, tmp_path):
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    refused = pytest.raises(UnwritablePathError, match="cannot create folder")
    with refused, memlens.record(not_a_dir / "x.pickle"):
        pytest.fail("the block must not run")
    refused = pytest.raises(UnwritablePathError, match="it is a directory")
    with refused, memlens.record(tmp_path):
        pytest.fail("the block must not run")
    assert fake.calls == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stacks": "cpp"}, "stacks must be 'python' or 'all', got 'cpp'"),
        ({"context": "some"}, "context must be 'state', 'alloc', 'all' or None, got 'some'"),
        ({"max_entries": 0}, "max_entries must be at least 1, got 0"),
        ({"max_entries": 1.5}, "max_entries must be a whole number, got 1.5"),
    ],
)
def test_bad_settings(fake, tmp_path, kwargs, message):
    with pytest.raises(RecordError) as info:
        memlens.record(tmp_path / "x.pickle", **kwargs)
    assert str(info.value) == message


def test_failed_dump_still_stops_recording(fake, tmp_path):
    fake.fail_snapshot = RuntimeError("driver said no")
    with (
        pytest.raises(RuntimeError, match="driver said no"),
        memlens.record(tmp_path / "x.pickle", report=False),
    ):
        pass
    assert fake.calls == [DEFAULT_START, ("snapshot",), ("stop",)]


def test_failed_dump_does_not_hide_the_blocks_exception(fake, tmp_path, caplog):
    fake.fail_snapshot = RuntimeError("driver said no")
    with (
        pytest.raises(ValueError, match="user bug"),
        memlens.record(tmp_path / "x.pickle", report=False),
    ):
        raise ValueError("user bug")
    assert fake.named_calls() == ["start", "snapshot", "stop"]
    assert "not written: driver said no" in caplog.text


def _fake_report_module(
    monkeypatch: pytest.MonkeyPatch, write_report: Callable[..., object]
) -> None:
    module = types.ModuleType("memlens.views.report")
    vars(module)["write_report"] = write_report
    monkeypatch.setitem(sys.modules, "memlens.views.report", module)


def test_report_is_written_beside_the_snapshot(fake, tmp_path, monkeypatch):
    seen = []

    def write_report(snapshot_path, html_path):
        seen.append((snapshot_path, html_path))
        html_path.write_text("<html></html>")

    _fake_report_module(monkeypatch, write_report)
    out = tmp_path / "step.pickle"
    with memlens.record(out) as rec:
        pass
    assert seen == [(out, tmp_path / "step.html")]
    assert rec.report_path == tmp_path / "step.html"


def test_report_failure_warns_once_and_keeps_the_snapshot(fake, tmp_path, monkeypatch, caplog):
    def write_report(snapshot_path, html_path):
        raise OSError("template missing")

    _fake_report_module(monkeypatch, write_report)
    caplog.set_level(logging.WARNING, logger="memlens.record")
    for name in ("a.pickle", "b.pickle"):
        with memlens.record(tmp_path / name) as rec:
            pass
        assert rec.snapshot_path is not None and rec.snapshot_path.is_file()
        assert rec.report_path is None
    warnings = [r for r in caplog.records if "HTML report not written" in r.getMessage()]
    assert len(warnings) == 1
    assert "OSError: template missing" in warnings[0].getMessage()


def test_report_false_writes_no_report(fake, tmp_path, monkeypatch):
    _fake_report_module(monkeypatch, lambda s, h: pytest.fail("no report was asked for"))
    with memlens.record(tmp_path / "x.pickle", report=False) as rec:
        pass
    assert rec.report_path is None


def test_backend_from_environment_variable(monkeypatch):
    monkeypatch.setenv(backend_mod.BACKEND_ENV, "record_fake_backend:FakeBackend")
    first = backend_mod.get_backend()
    assert isinstance(first, FakeBackend)
    assert backend_mod.get_backend() is first  # one per process


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nocolon", "must look like module:attr"),
        ("record_fake_backend:Nope", "cannot be loaded"),
    ],
)
def test_bad_backend_environment_variable(monkeypatch, spec, message):
    monkeypatch.setenv(backend_mod.BACKEND_ENV, spec)
    with pytest.raises(RecordError, match=message):
        backend_mod.get_backend()


def test_memlens_record_is_callable_however_it_was_reached():
    from memlens.capture.capture import Recording
    from memlens.recording import record

    assert isinstance(memlens.record("x.pickle"), Recording)
    assert isinstance(record("x.pickle"), Recording)
    assert memlens.record is record


def test_recording_hands_each_snapshot_to_its_callback(fake, tmp_path):
    from memlens.capture.capture import Recording

    seen = []

    def beside(path):
        seen.append(path)
        return path.with_suffix(".txt")

    out = tmp_path / "s.pickle"
    with Recording(out, on_snapshot_written=beside) as rec:
        pass
    assert seen == [out] and rec.report_path == tmp_path / "s.txt"


def test_capture_never_imports_the_views():
    """The report is joined on above capture (memlens.recording, cli/run.py), not in it."""
    import subprocess

    code = (
        "import sys, memlens.capture.capture, memlens.capture.runner, memlens.capture.oom; "
        "bad = [m for m in sys.modules if m.startswith('memlens.views')]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_history_switched_off_inside_the_block_is_said(fake, tmp_path, caplog):
    # what a script's own torch.cuda.memory._record_memory_history(enabled=None) does
    out = tmp_path / "off.pickle"
    with caplog.at_level(logging.WARNING, "memlens.record"), memlens.record(out, report=False):
        fake.alloc(MiB)
        fake.stop()
    assert fake.calls == [DEFAULT_START, ("stop",), ("snapshot",), ("stop",)]
    assert read_snapshot_file(out)["device_traces"] == [[]]
    assert [r.getMessage() for r in caplog.records] == [
        f"memlens: {out}: CUDA memory history was switched off during the recording by code "
        "outside memlens (torch.cuda.memory._record_memory_history(enabled=None)), which "
        "also clears it: this snapshot has the allocator's segments but no trace"
    ]


def test_history_still_on_says_nothing(fake, tmp_path, caplog):
    with (
        caplog.at_level(logging.WARNING, "memlens.record"),
        memlens.record(tmp_path / "on.pickle", report=False),
    ):
        fake.alloc(MiB)
    assert caplog.records == []

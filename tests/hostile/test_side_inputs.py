"""Issue 27 item 10: side inputs (`export --merge TRACE`, `--annotations FILE`) are checked
as snapshots are: one line and exit 2 for hostile JSON, never the last-resort handler, and
no figure from a value that cannot be a time."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from corpus import base_snapshot

from memlens.cli.main import run


@pytest.fixture
def snap_path(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(base_snapshot(), protocol=4))
    return p


def _one_line_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected" not in err, err
    return err


HOSTILE_JSON = {
    "deep": "[" * 100_000 + "]" * 100_000,
    "digits": '{"traceEvents": [], "x": ' + "9" * 5000 + "}",
    "nan": '{"traceEvents": [{"ph": "X", "ts": NaN}]}',
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_JSON))
def test_hostile_merge_trace_is_one_line(snap_path, tmp_path, capsys, kind) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(HOSTILE_JSON[kind])
    out = tmp_path / "out.json"
    err = _one_line_exit_2(
        ["export", str(snap_path), "--chrome-trace", str(out), "--merge", str(trace)], capsys
    )
    assert "is not a JSON trace" in err
    assert not out.exists()


def test_merge_base_time_past_any_clock_is_refused(snap_path, tmp_path, capsys) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [], "baseTimeNanoseconds": 10**30}))
    out = tmp_path / "out.json"
    err = _one_line_exit_2(
        ["export", str(snap_path), "--chrome-trace", str(out), "--merge", str(trace)], capsys
    )
    assert "baseTimeNanoseconds is not a time" in err
    assert not out.exists()  # no timestamps of -10^27 written


@pytest.mark.parametrize(
    "content",
    [
        HOSTILE_JSON["deep"],
        "[" + "9" * 5000 + "]",
        json.dumps([{"name": "a", "stage": "START", "time_us": 10**30}]),
        json.dumps([{"name": "a", "stage": "START", "time_us": 5, "device": -1}]),
        json.dumps([{"name": "a", "stage": "START", "time_us": 5, "device": "0"}]),
        json.dumps(
            {
                "format": "memlens.inspect.annotations/1",
                "steps": [{"time_us": 5, "modules": {"m": "big"}}],
            }
        ),  # fmt: skip
    ],
    ids=["deep", "digits", "time", "device", "device-type", "modules"],
)
def test_hostile_annotations_are_one_line(snap_path, tmp_path, capsys, content) -> None:
    ann = tmp_path / "ann.json"
    ann.write_text(content)
    _one_line_exit_2(["stages", str(snap_path), "--annotations", str(ann)], capsys)


def test_a_clock_running_backwards_is_not_a_negative_span(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    snap = base_snapshot()
    trace = snap["device_traces"][0]
    trace[0]["time_us"] = trace[-1]["time_us"] + 1_000_000_000_000  # the first entry, last
    p = tmp_path / "back.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    assert run(["summary", str(p)]) == 0
    out = capsys.readouterr().out
    assert "time span        1000000.000 s" in out
    assert "-" not in out.split("time span")[1].split("\n")[0]

"""`memlens export`: the snapshot as JSON in PyTorch's layout (read back to the same columns),
its memory as a Chrome trace (alone and merged into a real torch.profiler trace), Parquet."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from trace_reader import counter_tracks, read_tef, slices

import memlens
from memlens.cli.main import cli
from memlens.cli.main import run as cli_run
from memlens.simulation.synthetic import generate_snapshot


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gen") / "gen.pickle"
    generate_snapshot(path, events=3000, devices=2)
    return path


def assert_same_columns(a: memlens.Snapshot, b: memlens.Snapshot) -> None:
    assert a.strings == b.strings and a.streams == b.streams
    assert a.allocator_settings == b.allocator_settings and a.action_names == b.action_names
    for table in ("frames", "stacks", "segments", "annotations"):
        x, y = getattr(a, table), getattr(b, table)
        for f in fields(x):
            assert np.array_equal(getattr(x, f.name), getattr(y, f.name)), (table, f.name)
    assert sorted(a.traces) == sorted(b.traces)
    for d in a.traces:
        x, y = a.traces[d], b.traces[d]
        for f in fields(x):
            if f.name != "snapshot":
                vx, vy = getattr(x, f.name), getattr(y, f.name)
                same = np.array_equal(vx, vy) if isinstance(vx, np.ndarray) else vx == vy
                assert same, (d, f.name)


def test_snapshot_json_round_trips(generated: Path, tmp_path: Path) -> None:
    out = tmp_path / "snap.json"
    status = json.loads(run("export", str(generated), "--snapshot-json", str(out), "--json"))
    assert status["outputs"] == [
        {"format": "snapshot-json", "path": str(out), "bytes": out.stat().st_size,
         "files": [str(out)]}
    ]  # fmt: skip
    raw = json.loads(out.read_text())  # plain JSON in PyTorch's layout
    assert sorted(raw) == [
        "allocator_settings",
        "device_traces",
        "external_annotations",
        "segments",
    ]
    assert_same_columns(memlens.load(generated), memlens.load(out))


def test_real_snapshot_json_round_trips(shared_snapshots_dir: Path, tmp_path: Path) -> None:
    src = shared_snapshots_dir / "eor_nn_train.pickle"
    out = tmp_path / "real.json"
    run("export", str(src), "--snapshot-json", str(out))
    assert_same_columns(memlens.load(src), memlens.load(out))


def summary_figures(path: Path) -> dict[int, tuple[int, int]]:
    s = json.loads(run("summary", str(path), "--json"))
    return {d["device"]: (d["peak_active_bytes"], d["peak_reserved_bytes"]) for d in s["devices"]}


def test_chrome_trace_counters_peak_at_the_summary_figures(generated: Path, tmp_path: Path) -> None:
    out = tmp_path / "mem.json"
    run("export", str(generated), "--chrome-trace", str(out))
    trace = read_tef(out)
    tracks = counter_tracks(trace)
    snap = memlens.load(generated)
    for device, (active, reserved) in summary_figures(generated).items():
        pid = f"GPU {device} memory (memlens)"
        assert max(v for _, v in tracks[(pid, "allocated")]) == active
        assert max(v for _, v in tracks[(pid, "reserved")]) == reserved
        # on the snapshot's clock: the first sample is at the first entry's time_us
        dev = snap.device(device)
        assert tracks[(pid, "allocated")][0] == (int(dev.time_us[0]), dev.baseline_bytes)
        assert tracks[(pid, "allocated")][-1] == (int(dev.time_us[-1]), dev.end_active_bytes)
    # annotated stages are slices on each device's "stages" thread
    names = {s.name for s in slices(trace)}
    assert any(n.startswith("ProfilerStep#") for n in names)


def test_peak_inside_one_microsecond_is_a_sample() -> None:
    from memlens.views.export.chrome_trace import counter_samples

    times = np.array([10, 10, 10, 11, 12, 12])
    values = np.array([5, 9, 4, 4, 7, 6])
    assert counter_samples(times, values, 1) == [(10, 1), (10, 9), (10, 4), (12, 7), (12, 6)]


def profiler_trace(path: Path) -> None:
    """A real torch.profiler Chrome trace (CPU only), recorded in this process."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof, record_function("forward"):
        x = torch.randn(64, 64)
        (x @ x).sum()
    prof.export_chrome_trace(str(path))


def snapshot_in_window(prof: Path, path: Path) -> tuple[dict[str, Any], int]:
    """A snapshot (JSON) whose entries fall inside the profiled window, on the epoch clock:
    2 MiB reserved, 1000 bytes allocated and freed, a 'forward' stage of 3 us, starting at
    the profiler's first complete event. Returns (that event, its ts as whole us)."""
    original = json.loads(prof.read_text())
    base_us = original["baseTimeNanoseconds"] // 1000
    kernel = next(e for e in original["traceEvents"] if e.get("ph") == "X")
    kt = int(kernel["ts"])  # the profiler's ts are fractional microseconds
    t0 = base_us + kt
    path.write_text(json.dumps({
        "segments": [], "external_annotations": [
            {"name": "forward", "stage": "START", "device": 0, "time_us": t0},
            {"name": "forward", "stage": "END", "device": 0, "time_us": t0 + 3}],
        "device_traces": [[
            {"action": "segment_alloc", "addr": 4096, "size": 2 << 20, "stream": 0, "time_us": t0},
            {"action": "alloc", "addr": 4096, "size": 1000, "stream": 0, "time_us": t0 + 1},
            {"action": "free_requested", "addr": 4096, "size": 1000, "stream": 0, "time_us": t0 + 2},
            {"action": "free_completed", "addr": 4096, "size": 1000, "stream": 0, "time_us": t0 + 2}]],
    }))  # fmt: skip
    return kernel, kt


def test_merge_into_a_real_profiler_trace(tmp_path: Path) -> None:
    prof = tmp_path / "profile.json"
    profiler_trace(prof)
    original = json.loads(prof.read_text())
    base_us = original["baseTimeNanoseconds"] // 1000
    snap_path = tmp_path / "snap.json"
    _, kt = snapshot_in_window(prof, snap_path)
    out = tmp_path / "merged.json"
    status = json.loads(
        run("export", str(snap_path), "--chrome-trace", str(out), "--merge", str(prof), "--json")
    )
    assert status["merged_into"] == str(prof) and status["clock_base_us"] == base_us
    assert status["warnings"] == []
    merged = read_tef(out)
    # the profiler's own events are all still there, unchanged
    assert merged.events[: len(original["traceEvents"])] == original["traceEvents"]
    tracks = counter_tracks(merged)
    pid = "GPU 0 memory (memlens)"
    assert tracks[(pid, "allocated")] == [
        (kt, 0),
        (kt + 1, 1000),
        (kt + 2, 0),
    ]
    assert tracks[(pid, "reserved")] == [(kt, 0), (kt, 2 << 20)]  # before, after the entry
    (stage,) = [s for s in slices(merged) if s.process == pid]
    assert (stage.name, stage.ts, stage.dur) == ("forward", kt, 3)


def test_parquet_has_the_sql_tables(generated: Path, tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from memlens.analysis.sql import TABLES, query

    out = tmp_path / "pq"
    status = json.loads(run("export", str(generated), "--parquet", str(out), "--json"))
    assert status["outputs"][0]["files"] == [str(out / f"{t}.parquet") for t in TABLES]
    snap = memlens.load(generated)
    for table in TABLES:
        got = pq.read_table(out / f"{table}.parquet")
        want = query(snap, f"SELECT * FROM {table}")
        assert got.column_names == want["columns"]
        assert got.num_rows == len(want["rows"])
    events = pq.read_table(out / "events.parquet").to_pydict()
    for d, dev in snap.traces.items():
        mine = [a for dv, a in zip(events["device"], events["active_after"]) if dv == d]
        assert mine == dev.active_after.tolist()


def test_errors_are_one_line(
    generated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def error(*args: str) -> str:
        assert cli_run(["export", str(generated), *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("memlens: error: "), err
        return err

    assert "nothing to export" in error()
    assert "--merge needs --chrome-trace" in error("--merge", str(generated))
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    assert "is not a JSON trace" in error(
        "--chrome-trace", str(tmp_path / "o.json"), "--merge", str(bad)
    )
    untimed = tmp_path / "untimed.json"
    untimed.write_text(json.dumps({"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 1, "size": 8, "stream": 0}]]}))  # fmt: skip
    assert cli_run(["export", str(untimed), "--chrome-trace", str(tmp_path / "u.json")]) == 2
    assert "has no timestamps" in capsys.readouterr().err


def test_a_trace_from_another_run_is_merged_with_a_warning(generated: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.json"  # array format, epoch ts (no baseTimeNanoseconds)
    other.write_text(json.dumps([{"name": "k", "ph": "X", "ts": 5, "dur": 1, "pid": 1, "tid": 1}]))
    out = tmp_path / "m.json"
    status = json.loads(
        run("export", str(generated), "--chrome-trace", str(out), "--merge", str(other), "--json")
    )
    assert status["clock_base_us"] == 0
    assert status["warnings"] == [
        f"the snapshot's time range does not overlap {other}'s: were they recorded in the same run?"
    ]
    events = read_tef(out).events
    assert events[0] == {"name": "k", "ph": "X", "ts": 5, "dur": 1, "pid": 1, "tid": 1}
    text = run("export", str(generated), "--chrome-trace", str(out), "--merge", str(other))
    assert text.splitlines()[1:] == [
        f"with {other}'s events, unchanged, and the memory tracks (ts = time_us - 0)",
        f"warning: the snapshot's time range does not overlap {other}'s: were they recorded in "
        "the same run?",
    ]


def test_a_value_json_cannot_hold_is_a_memlens_error(generated: Path, tmp_path: Path) -> None:
    # the loader already turns NaN settings into text; a snapshot built in code may not
    from memlens.errors import MemlensError
    from memlens.snapshot.pytorch_layout import write_json

    snap = memlens.load(generated)
    snap.allocator_settings = {"garbage_collection_threshold": float("nan")}
    with pytest.raises(MemlensError, match="cannot write the snapshot as JSON"):
        write_json(snap, tmp_path / "o.json")

"""The inspector's activation bytes shown next to a snapshot of the same run, as annotations.
No torch: annotations.json documents are written by hand here (the inspector tests check
that a real run writes them)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from typing import Any

import pytest

import memlens
from memlens.analysis.stages import compare_steps, stage_table
from memlens.cli.main import main
from memlens.errors import MemlensError
from memlens.inspector.annotations import activation_annotations, annotations_from

MiB = 1024 * 1024
T0 = 1_700_000_000_000_000


def _doc(steps: list[dict[str, Any]]) -> dict[str, Any]:
    return {"format": "memlens.inspect.annotations/1", "kind": "activation_bytes",
            "unit": "bytes", "modules": ["fc1", "fc2"], "steps": steps}  # fmt: skip


def _write(tmp_path, steps: list[dict[str, Any]]):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "annotations.json").write_text(json.dumps(_doc(steps)))
    return tmp_path


def _snapshot() -> dict[str, Any]:
    """One 8 MiB segment; events at T0+10..T0+60 (µs): alloc A 1 MiB, alloc B 2 MiB, free B
    (requested, completed), alloc C 3 MiB. Active after each (MiB): 1, 3, 3, 1, 4."""

    def ev(action: str, addr: int, size: int, t: int) -> dict[str, Any]:
        return {"action": action, "addr": addr, "size": size, "stream": 0,
                "time_us": T0 + t, "frames": []}  # fmt: skip

    trace = [
        ev("alloc", 0x1000000, MiB, 10),
        ev("alloc", 0x1100000, 2 * MiB, 20),
        ev("free_requested", 0x1100000, 2 * MiB, 30),
        ev("free_completed", 0x1100000, 2 * MiB, 40),
        ev("alloc", 0x1300000, 3 * MiB, 60),
    ]
    blocks = [
        {"address": 0x1000000, "size": MiB, "requested_size": MiB, "state": "active_allocated", "frames": []},
        {"address": 0x1100000, "size": 2 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
        {"address": 0x1300000, "size": 3 * MiB, "requested_size": 3 * MiB, "state": "active_allocated", "frames": []},
        {"address": 0x1600000, "size": 2 * MiB, "requested_size": 0, "state": "inactive", "frames": []},
    ]  # fmt: skip
    seg = {"device": 0, "address": 0x1000000, "total_size": 8 * MiB, "stream": 0,
           "segment_type": "large", "allocated_size": 4 * MiB, "active_size": 4 * MiB,
           "requested_size": 4 * MiB, "blocks": blocks}  # fmt: skip
    return {"segments": [seg], "device_traces": [trace]}


@pytest.fixture
def one_step_run(tmp_path):
    """A snapshot file, and an inspector run whose step 0 covers events 0..2 of it."""
    snap = tmp_path / "snap.pickle"
    snap.write_bytes(pickle.dumps(_snapshot(), protocol=4))
    run = _write(tmp_path / "run", [
        {"step": 0, "time_us": T0 + 5, "end_time_us": T0 + 35, "total_bytes": 3 * MiB,
         "modules": {"fc1": MiB, "fc2": 2 * MiB}},
    ])  # fmt: skip
    return snap, run


def test_each_step_is_one_named_range(tmp_path):
    run = _write(tmp_path, [
        {"step": 0, "time_us": T0 + 5, "end_time_us": T0 + 35, "total_bytes": 3 * MiB,
         "modules": {"fc1": MiB, "fc2": 2 * MiB}},
        {"step": 20, "time_us": T0 + 50, "end_time_us": T0 + 70, "total_bytes": 512,
         "modules": {"fc1": 512}},
    ])  # fmt: skip
    got = activation_annotations(run)
    first = "forward activations 3.00 MiB (largest fc2 2.00 MiB)#0"
    second = "forward activations 512 B (largest fc1 512 B)#20"
    assert got == [
        {"name": first, "stage": "START", "device": 0, "time_us": T0 + 5},
        {"name": first, "stage": "END", "device": 0, "time_us": T0 + 35},
        {"name": second, "stage": "START", "device": 0, "time_us": T0 + 50},
        {"name": second, "stage": "END", "device": 0, "time_us": T0 + 70},
    ]
    # the file itself works as well as its run directory
    assert activation_annotations(run / "annotations.json", device=1)[0]["device"] == 1


def test_stages_of_the_snapshot_show_the_forward_passes(tmp_path):
    run = _write(tmp_path, [
        {"step": 0, "time_us": T0 + 5, "end_time_us": T0 + 35, "total_bytes": 3 * MiB,
         "modules": {"fc1": MiB, "fc2": 2 * MiB}},
        {"step": 1, "time_us": T0 + 50, "end_time_us": T0 + 70, "total_bytes": 3 * MiB,
         "modules": {"fc1": 3 * MiB}},
    ])  # fmt: skip
    snap = memlens.load(_snapshot(), cache=False)
    snap.add_annotations(activation_annotations(run))
    rows = stage_table(snap.device(0), top=0)["stages"]
    assert [r["name"].split(" (")[0] for r in rows] == ["forward activations 3.00 MiB"] * 2
    # step 0 covers events 0..2 (T0+10..T0+30): start 0, peak 3 MiB, end 3 MiB (B requested
    # but not completed); step 1 covers event 4 (T0+60): start 1 MiB, peak = end = 4 MiB
    assert [(r["active_start_bytes"], r["peak_bytes"], r["active_end_bytes"]) for r in rows] == [
        (0, 3 * MiB, 3 * MiB),
        (MiB, 4 * MiB, 4 * MiB),
    ]


def test_steps_without_a_clock_are_skipped_and_old_files_still_read(tmp_path):
    run = _write(tmp_path, [
        {"step": 0, "time_us": None, "total_bytes": 1, "modules": {"fc1": 1}},
        {"step": 1, "time_us": T0, "total_bytes": 8, "modules": {}},  # no end_time_us
    ])  # fmt: skip
    got = activation_annotations(run)
    assert [(a["stage"], a["time_us"]) for a in got] == [("START", T0), ("END", T0)]
    assert got[0]["name"] == "forward activations 8 B#1"


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "no such file"),
        ("{not json", "not readable as JSON"),
        ('{"format": "other"}', "not an inspector annotations file"),
        ('{"format": "memlens.inspect.annotations/1", "steps": 3}', "'steps' is not a list"),
    ],
)
def test_bad_files_give_one_line(tmp_path, content, message):
    if content is not None:
        (tmp_path / "annotations.json").write_text(content)
    with pytest.raises(MemlensError, match=message):
        activation_annotations(tmp_path)


def test_any_tool_can_add_stages_as_a_json_list(tmp_path):
    path = tmp_path / "marks.json"
    marks = [{"name": "eval", "stage": "START", "time_us": T0 + 15},
             {"name": "eval", "stage": "END", "time_us": T0 + 45}]  # fmt: skip
    path.write_text(json.dumps(marks))
    assert annotations_from(path, device=0) == [{"device": 0, **m} for m in marks]
    path.write_text(json.dumps([{"name": "x", "stage": "BEGIN", "time_us": 1}]))
    with pytest.raises(MemlensError, match="entry 0 is not an annotation"):
        annotations_from(path)
    path.write_text('{"a": 1}')
    with pytest.raises(MemlensError, match="expected an inspector annotations.json or a JSON list"):
        annotations_from(path)


def _run_cli(args: list[str]) -> None:
    try:
        main(args)
    except SystemExit as exc:  # main exits only on errors
        raise AssertionError(f"memlens {args[0]} exited with {exc.code}") from None


def test_stages_command_shows_the_inspector_run(one_step_run, capsys):
    snap, run = one_step_run
    _run_cli(["stages", str(snap), "--annotations", str(run), "--json"])
    (row,) = json.loads(capsys.readouterr().out)["stages"]
    assert row["name"] == "forward activations 3.00 MiB (largest fc2 2.00 MiB)#0"
    assert (row["first_event"], row["last_event"], row["peak_bytes"]) == (0, 2, 3 * MiB)
    # without the option the snapshot has no stages
    _run_cli(["stages", str(snap), "--json"])
    assert json.loads(capsys.readouterr().out)["stages"] == []


def test_viewer_draws_the_forward_passes(one_step_run):
    """`memlens view SNAP --annotations RUN` as a user runs it: the stage strip's spans."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    snap, run = one_step_run
    cmd = [sys.executable, "-m", "memlens", "view", str(snap), "--annotations", str(run),
           "--no-browser", "--port", "0"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" at ", 1)[1].split()[0]
        deadline = time.monotonic() + 20
        while True:
            try:
                spans = httpx.get(url + "api/d/0/annotations", timeout=5).json()["spans"]
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the viewer did not answer"
                time.sleep(0.1)
        got = [(s["name"], s["t0"], s["t1"], s["e0"], s["e1"]) for s in spans]
        name = "forward activations 3.00 MiB (largest fc2 2.00 MiB)#0"
        assert got == [(name, T0 + 5, T0 + 35, 0, 3)]
    finally:
        proc.terminate()
        proc.wait(10)


def test_tui_names_the_forward_pass_at_the_cursor(one_step_run, monkeypatch):
    pytest.importorskip("textual")
    from memlens.views.tui import app as tui_app

    snap, run = one_step_run
    opened = []
    monkeypatch.setattr(tui_app.TuiApp, "run", lambda self: opened.append(self))
    _run_cli(["tui", str(snap), "--annotations", str(run)])
    timeline = opened[0].sessions[0].timeline
    name = "forward activations 3.00 MiB (largest fc2 2.00 MiB)#0"
    assert [timeline.stage_at(e) for e in range(5)] == [name, name, name, "", ""]


def test_steps_with_the_same_activations_are_one_repeated_stage(tmp_path):
    same = {"total_bytes": 3 * MiB, "modules": {"fc1": MiB, "fc2": 2 * MiB}}
    run = _write(tmp_path, [
        {"step": 0, "time_us": T0 + 5, "end_time_us": T0 + 35, **same},
        {"step": 20, "time_us": T0 + 50, "end_time_us": T0 + 70, **same},
    ])  # fmt: skip
    snap = memlens.load(_snapshot(), cache=False)
    snap.add_annotations(activation_annotations(run))
    (group,) = compare_steps(snap.device(0))["groups"]
    assert group["base_name"] == "forward activations 3.00 MiB (largest fc2 2.00 MiB)"
    # step 0 ends at 3 MiB active (after event 2), step 20 at 4 MiB (after event 4): +1 MiB
    assert (group["count"], group["peak_min_bytes"], group["peak_max_bytes"]) == (
        2,
        3 * MiB,
        4 * MiB,
    )
    assert group["end_growth_bytes"] == MiB

"""`memlens summary` and `memlens generate` as a user runs them."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

from click.testing import CliRunner

from memlens.cli.main import cli
from snapshot_builders import hand_snapshot


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_summary_json_schema_and_values(hand_file):
    r = run("summary", str(hand_file), "--json")
    assert r.exit_code == 0
    out = json.loads(r.output)
    assert out["schema"] == 1
    (d,) = out["devices"]
    assert {k: d[k] for k in ("device", "trace_entries", "baseline_bytes", "peak_active_bytes", "peak_event_index", "end_active_bytes", "peak_reserved_bytes")} == {
        "device": 0, "trace_entries": 10, "baseline_bytes": 1050, "peak_active_bytes": 1510,
        "peak_event_index": 8, "end_active_bytes": 1310, "peak_reserved_bytes": 2 * 1024 * 1024,
    }  # fmt: skip
    assert d["starts_mid_run"] is True and d["preexisting_freed_in_trace"] == 1
    assert d["preexisting_alive_throughout"] == 1
    assert d["live_at_peak"] == 4
    # at the peak: G (1000, frames=[user]), A2 (300), B (200), D (10) - all but G in train_step
    assert [(s["site"], s["bytes"], s["count"]) for s in d["top_sites"]] == [
        ("train_step (/home/u/train.py:10)", 1510, 4),
    ]
    assert d["time_start_us"] == 1000 and d["time_end_us"] == 1009
    assert d["ooms"] == []


def test_summary_names_each_oom(tmp_path):
    raw = hand_snapshot()
    raw["device_traces"][0].append(
        {
            "action": "oom",
            "device_free": 3 * 1024 * 1024,
            "size": 40 * 1024 * 1024,
            "stream": 0,
            "time_us": 1010,
            "frames": [],
        }  # fmt: skip
    )
    p = tmp_path / "oom.pickle"
    p.write_bytes(pickle.dumps(raw, protocol=4))
    (d,) = json.loads(run("summary", str(p), "--json").output)["devices"]
    assert d["ooms"] == [
        {"event": 10, "time_us": 1010, "requested_bytes": 40 * 1024 * 1024,
         "device_free_bytes": 3 * 1024 * 1024}
    ]  # fmt: skip
    text = run("summary", str(p)).output
    assert (
        "  OOM              40.00 MiB requested at event 10 with 3.00 MiB free on the device\n"
        in text
    )
    assert "(`memlens oom` explains it)" in text


def test_summary_text(hand_file):
    r = run("summary", str(hand_file))
    assert r.exit_code == 0
    assert "peak active      1.47 KiB  at event 8" in r.output
    assert "1 allocations predate the trace" in r.output


def test_summary_device_option_and_unknown_device(hand_file):
    assert run("summary", str(hand_file), "--device", "0", "--json").exit_code == 0
    r = subprocess.run(
        [sys.executable, "-m", "memlens", "summary", str(hand_file), "--device", "4"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "device 4 is not in this snapshot" in r.stderr


def test_generate_then_summary_real_process(tmp_path):
    out = tmp_path / "gen.pickle"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "memlens",
            "generate",
            str(out),
            "--events",
            "3000",
            "--devices",
            "2",
            "--truncate",
            "100",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "memlens", "summary", str(out), "--json"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert [d["device"] for d in s["devices"]] == [0, 1]
    assert all(d["truncated"] and d["starts_mid_run"] for d in s["devices"])
    assert all(d["top_sites"] for d in s["devices"])


def test_help_lists_commands():
    r = run("--help")
    assert r.exit_code == 0
    for name in ("summary", "generate"):
        assert name in r.output


def test_summary_counts_the_annotations_stages_pairs(tmp_path):
    """d3: annotations stamped with another device (the *current* device when recorded)
    belong to the only trace; summary counted 0 where `stages` found the stage."""
    raw = hand_snapshot()
    raw["device_traces"] = [[], raw["device_traces"][0]]  # the trace is device 1's
    raw["segments"][0]["device"] = 1
    raw["external_annotations"] = [
        {"name": "fwd", "stage": "START", "device": 0, "time_us": 1002},
        {"name": "fwd", "stage": "END", "device": 0, "time_us": 1006},
    ]
    p = tmp_path / "dev1.pickle"
    p.write_bytes(pickle.dumps(raw, protocol=4))
    stages = json.loads(run("stages", str(p), "--json").output)
    assert stages["device"] == 1 and [s["name"] for s in stages["stages"]] == ["fwd"]
    (d,) = json.loads(run("summary", str(p), "--device", "1", "--json").output)["devices"]
    assert d["annotations"] == 2
    assert "  annotations      2\n" in run("summary", str(p), "--device", "1").output


def test_a_peak_before_the_first_event_reads_as_the_baseline(tmp_path):
    from snapshot_builders import block, ev, segment

    # a block alive before the trace is freed by its only event: the peak is the baseline
    snap = {"segments": [segment(0x1000, [block(0x1000, 512, 512, "inactive")])],
            "device_traces": [[ev("free_completed", 0x1000, 512, 1)]]}  # fmt: skip
    path = tmp_path / "base.pickle"
    path.write_bytes(pickle.dumps(snap))
    out = run("summary", str(path)).output
    assert "  peak active      512 B  before the first event (the baseline)" in out
    assert "at before" not in out

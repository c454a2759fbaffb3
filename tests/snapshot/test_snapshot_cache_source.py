"""The source a cached snapshot reports is the path given for this open, not the one of
the open that wrote the cache entry (which may be relative to another directory)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

from click.testing import CliRunner

import memlens
from memlens.cli.main import cli
from memlens.views.tui.describe import summary_figures
from snapshot_builders import ev


def _write(path: Path) -> None:
    trace = [ev("alloc", 0x1000, 100, 0), ev("alloc", 0x2000, 300, 1)]
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}))


def test_open_from_two_directories(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    snap_file = tmp_path / "runs" / "step.pickle"
    _write(snap_file)
    runner = CliRunner()
    monkeypatch.chdir(tmp_path / "runs")
    first = memlens.load("step.pickle")
    assert first.source == "step.pickle" and not first.from_cache
    out = runner.invoke(cli, ["summary", "--json", "step.pickle"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["source"] == "step.pickle"
    # from the parent directory: the same cache entry, the path given now
    monkeypatch.chdir(tmp_path)
    again = memlens.load("runs/step.pickle")
    assert again.from_cache and again.source == "runs/step.pickle"
    out = runner.invoke(cli, ["summary", "--json", "runs/step.pickle"])
    assert json.loads(out.stdout)["source"] == "runs/step.pickle"
    text = runner.invoke(cli, ["summary", "runs/step.pickle"]).stdout
    assert "runs/step.pickle" in text and "\nstep.pickle" not in text
    # and an absolute path stays absolute
    assert memlens.load(str(snap_file)).source == str(snap_file)
    # the TUI's summary finds the file (its line was missing when the old relative path
    # did not resolve from here)
    lines = summary_figures(memlens.load("runs/step.pickle").device(0))
    assert lines[0] == "file           304 B (304 bytes), read from the column cache"

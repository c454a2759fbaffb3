"""The `memlens` program skips the interpreter's teardown after a read-only command
(cli.main.console_main): its output must still arrive whole, and its exit code intact."""

from __future__ import annotations

import json
import subprocess
import sys

import memlens

PROGRAM = [sys.executable, "-m", "memlens"]


def test_output_is_whole_and_the_exit_code_kept(tmp_path):
    path = tmp_path / "g.pickle"
    memlens.generate_snapshot(path, events=3000, seed=3)
    out = tmp_path / "out.json"
    with open(out, "wb") as fh:  # a file, not a terminal: block-buffered until flushed
        done = subprocess.run([*PROGRAM, "summary", "--json", "--no-cache", str(path)], stdout=fh)
    assert done.returncode == 0
    expected = memlens.load(path, cache=False)
    got = json.loads(out.read_text())
    device = got["devices"][0]
    assert device["trace_entries"] == expected.device(0).n_events
    assert device["peak_active_bytes"] == expected.device(0).peak_active_bytes

    missing = subprocess.run(
        [*PROGRAM, "summary", str(tmp_path / "nope.pickle")], capture_output=True, text=True
    )
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "no such file" in missing.stderr


def test_a_traced_process_exits_normally(tmp_path):
    """Under a tracer (coverage, a debugger) the normal exit runs: atexit hooks fire."""
    path = tmp_path / "g.pickle"
    memlens.generate_snapshot(path, events=500, seed=4)
    code = (
        "import atexit, sys; sys.settrace(lambda *a: None);"
        "atexit.register(lambda: print('atexit ran'));"
        f"sys.argv = ['memlens', 'summary', '--no-cache', {str(path)!r}];"
        "from memlens.cli.main import console_main; console_main()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0
    assert done.stdout.rstrip().endswith("atexit ran")

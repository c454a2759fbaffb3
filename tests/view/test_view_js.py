"""The viewer's JavaScript unit tests (tests/js, node's built-in test runner), run from
pytest so the one test command covers them; skipped when node is not installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

JS_TESTS = Path(__file__).resolve().parent.parent / "js"


def test_node_unit_tests_pass():
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    proc = subprocess.run(
        [node, "--test", str(JS_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # the runner found the tests (a wrong path would run none and still exit 0)
    passed = [line for line in proc.stdout.splitlines() if line.startswith("# pass ")]
    assert passed and int(passed[-1].split()[-1]) >= 16, proc.stdout[-2000:]

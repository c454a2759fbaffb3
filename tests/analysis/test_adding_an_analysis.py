"""Adding an analysis touches only its own files: in a scratch copy of the package, a toy
analysis (`largest`: the largest allocation of the trace) is added as
docs/architecture.md's "How to add... an analysis" says (its function, result type,
renderer, declaration, docs lines and its own test) and nothing else; it then appears in
the CLI (text and --json), the Python API, the MCP tools and `capabilities`, and the
shared tests (the registry's, the JSON schema's, the agents page's) pass unchanged."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snapshot_builders import hand_snapshot

ROOT = Path(__file__).resolve().parents[2]

# the toy's own files (new) and its lines in the shared declaration files (appended)
FUNCTION = '''"""The largest allocation of the trace."""

from __future__ import annotations

from memlens.analysis.results import LargestResult
from memlens.snapshot.model import DeviceTrace


def largest(dev: DeviceTrace) -> LargestResult:
    return {"device": dev.device, "bytes": int(dev.alloc_size.max(initial=0))}
'''
RESULT = """

class LargestResult(TypedDict):
    device: int
    bytes: int
"""
RENDERER = """from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import LargestResult


def render_largest(result: LargestResult, options: Mapping[str, Any]) -> str:
    return f"device {result['device']}: largest allocation {result['bytes']} B"
"""
DECLARATION = """
LARGEST = Analysis(
    "largest", "the largest allocation of the trace",
    A + "largest:largest", R.LargestResult, T + "largest:render_largest", hide=False,
)  # fmt: skip
BUILTIN = (*BUILTIN, LARGEST)
"""
SCHEMA = '\n## `memlens largest`\n\n```\n{"device": int, "bytes": int}\n```\n'
DOCS_ROW = "| `memlens largest` | `largest.largest(dev)` | the largest allocation of the trace |\n"
OWN_TEST = """import memlens
from memlens.analysis.largest import largest


def test_largest(hand_file):
    assert largest(memlens.load(str(hand_file)).device(0)) == {"device": 0, "bytes": 1000}
"""


def scratch_copy(tmp: Path) -> Path:
    """src/, tests/, docs/ and pyproject.toml copied, then the toy added."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for part in ("src", "tests", "docs"):
        shutil.copytree(ROOT / part, tmp / part, ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", tmp)
    pkg = tmp / "src" / "memlens"
    (pkg / "analysis" / "largest.py").write_text(FUNCTION)
    (pkg / "views" / "text" / "largest.py").write_text(RENDERER)
    (tmp / "tests" / "analysis" / "test_largest.py").write_text(OWN_TEST)
    for path, text in [
        (pkg / "analysis" / "results.py", RESULT),
        (pkg / "analysis" / "declarations.py", DECLARATION),
        (tmp / "docs" / "json-schema.md", SCHEMA),
    ]:
        path.write_text(path.read_text() + text)
    analyses = tmp / "docs" / "analyses.md"
    row = "| `memlens sql` |"
    analyses.write_text(analyses.read_text().replace(row, DOCS_ROW + row, 1))
    return tmp


@pytest.mark.slow
def test_a_new_analysis_touches_only_its_own_files(tmp_path):
    root = scratch_copy(tmp_path / "repo")
    hand = tmp_path / "hand.pickle"
    hand.write_bytes(pickle.dumps(hand_snapshot(), protocol=4))
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "MEMLENS_CACHE_DIR": str(tmp_path)}

    def python(*args: str) -> str:
        done = subprocess.run([sys.executable, *args], env=env, cwd=root, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    expected = {"device": 0, "bytes": 1000}
    assert python("-m", "memlens", "largest", str(hand)) == "device 0: largest allocation 1000 B\n"
    assert json.loads(python("-m", "memlens", "largest", str(hand), "--json")) == expected
    api = "import json, sys, memlens; print(json.dumps(memlens.analyze('largest', sys.argv[1])))"
    assert json.loads(python("-c", api, str(hand))) == expected
    mcp = (
        "import json, sys; from memlens.agents.bound import Bounds; "
        "from memlens.agents.dispatch import Dispatcher; from memlens.agents.session import Session; "
        "from memlens.cli.mcp import agent_tools; "
        "d = Dispatcher(agent_tools(), Session(), Bounds(items=50, chars=100_000)); "
        "print(d.call('largest', {'snapshot': sys.argv[1]}).text)"
    )
    assert json.loads(python("-c", mcp, str(hand))) == expected
    listing = json.loads(python("-m", "memlens", "capabilities", "--json"))
    assert "largest" in listing["mcp_tools"]
    assert "largest" in [c["name"] for c in listing["commands"]]
    # the shared tests, unchanged, pass with it (and its own test)
    shared = [
        "tests/analysis/test_registry.py",
        "tests/analysis/test_json_schema.py",
        "tests/agents/test_docs_tools.py",
        "tests/analysis/test_largest.py",
    ]
    python("-m", "pytest", "-q", "-p", "no:cacheprovider", *shared)

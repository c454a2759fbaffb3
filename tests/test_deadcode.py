"""scripts/deadcode.py finds what nothing in src calls (scripts/check.sh runs it)."""

from __future__ import annotations

import os
from types import ModuleType

import pytest

from script_module import load_script

pytest.importorskip("vulture")


def _deadcode() -> ModuleType:
    return load_script("deadcode")


@pytest.mark.skipif(
    os.environ.get("MEMLENS_CHECK_SH_FOLLOWS") == "1",
    reason="scripts/check.sh runs scripts/deadcode.py after the tests (.ci/run)",
)
def test_src_has_no_dead_code():
    assert _deadcode().dead() == []


def test_a_dead_function_and_constant_are_found(tmp_path, monkeypatch):
    deadcode = _deadcode()
    pkg = tmp_path / "src" / "memlens"
    pkg.mkdir(parents=True)
    (pkg / "m.py").write_text(
        "LIMIT = 3\nUSED = 4\n\n\ndef gone(x):\n    return x\n\n\n"
        "def kept(param):\n    return USED\n\n\n"
        'kept("memlens.m:named")\n\n\ndef named():\n    return 0\n'
    )
    whitelist = tmp_path / "whitelist.py"
    whitelist.write_text("")
    monkeypatch.setattr(deadcode, "ROOT", tmp_path)
    monkeypatch.setattr(deadcode, "SRC", pkg)
    monkeypatch.setattr(deadcode, "WHITELIST", whitelist)
    assert deadcode.dead() == [
        "src/memlens/m.py:1: unused variable 'LIMIT'",
        "src/memlens/m.py:5: unused function 'gone'",
    ]

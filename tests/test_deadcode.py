"""scripts/deadcode.py finds what nothing in src calls (scripts/check.sh runs it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("vulture")
ROOT = Path(__file__).resolve().parent.parent


def _deadcode():
    spec = importlib.util.spec_from_file_location("deadcode", ROOT / "scripts" / "deadcode.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["deadcode"] = module
    spec.loader.exec_module(module)
    return module


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

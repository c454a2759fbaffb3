"""The top-level package: lazy names, their TYPE_CHECKING twins, one version source."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import memlens

ROOT = Path(__file__).resolve().parents[1]
INIT = ROOT / "src" / "memlens" / "__init__.py"


def test_import_memlens_stays_light():
    # a fresh interpreter: the version and the lazy names cost nothing until used
    code = (
        "import sys, memlens; "
        "heavy = {'numpy', 'torch', 'importlib.metadata', 'click'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_every_lazy_name_is_declared_for_type_checkers():
    """The TYPE_CHECKING block imports each lazy name from the module _LAZY names, as
    `X as X` (an explicit re-export under its own name, the name __getattr__ looks up),
    so type checkers see exactly what runs."""
    tree = ast.parse(INIT.read_text())
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    imports = [
        (node.module, alias)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    assert [alias.name for _, alias in imports] == [alias.asname for _, alias in imports]
    assert {alias.name: module for module, alias in imports} == memlens._LAZY


def test_every_public_name_resolves():
    for name in memlens.__all__:
        assert getattr(memlens, name) is not None, name


def test_the_version_comes_from_pyproject_only():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project.get("dynamic", [])
    assert memlens.__version__ == project["version"]
    assert "__version__ =" not in INIT.read_text()  # not written a second time

"""A skip reason names the shared snapshots as `../shared/snapshots` (shared_data.
SHARED_LABEL), never by an absolute path outside the repository: the reasons are printed
with `-rs`, read by people on other machines and pasted into issues."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PATH_NAMES = {"SHARED_SNAPSHOTS", "REPO_ROOT", "shared_snapshots_dir"}


def _interpolated_names(node: ast.AST) -> set[str]:
    """Names used inside the {...} parts of the f-strings under `node`."""
    out: set[str] = set()
    for f in ast.walk(node):
        if isinstance(f, ast.FormattedValue):
            out |= {n.id for n in ast.walk(f.value) if isinstance(n, ast.Name)}
    return out


def test_no_skip_reason_interpolates_an_absolute_path():
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            fn = call.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
            if name not in ("skip", "skipif", "importorskip"):
                continue
            args = [*call.args, *(k.value for k in call.keywords)]
            used = set().union(*(_interpolated_names(a) for a in args)) if args else set()
            if used & PATH_NAMES:
                offenders.append(f"{path.relative_to(TESTS)}:{call.lineno}")
    assert offenders == []


def test_the_label_is_relative():
    from shared_data import SHARED_LABEL

    assert not SHARED_LABEL.startswith("/")

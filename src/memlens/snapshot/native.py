"""The compiled helpers (memlens.snapshot._fastreader, built by setup.py when a C compiler
is there), unless MEMLENS_READER=python asks for the Python path everywhere."""

from __future__ import annotations

import os
from types import ModuleType

READER_ENV = "MEMLENS_READER"  # auto (default) | python | compiled

_module: ModuleType | None
try:
    from memlens.snapshot import _fastreader as _module
except ImportError:  # no compiler at install time
    _module = None


def built() -> ModuleType | None:
    """The extension module if it was built (whatever MEMLENS_READER says)."""
    return _module


def native() -> ModuleType | None:
    """The extension module, or None for the Python path (not built, or switched off)."""
    if os.environ.get(READER_ENV, "").strip().lower() == "python":
        return None
    return _module

"""The compiled helpers, built by setup.py when a C compiler is there: the reader
(memlens.snapshot._fastreader) and the replay (memlens.snapshot._fastreplay). Each is
used unless MEMLENS_READER=python asks for the Python path everywhere."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

READER_ENV = "MEMLENS_READER"  # auto (default) | python | compiled


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"memlens.snapshot.{name}")
    except ImportError:  # no compiler at install time
        return None


_module = _optional("_fastreader")
_replay = _optional("_fastreplay")


def _python_asked() -> bool:
    return os.environ.get(READER_ENV, "").strip().lower() == "python"


def built() -> ModuleType | None:
    """The reader extension if it was built (whatever MEMLENS_READER says)."""
    return _module


def built_replay() -> ModuleType | None:
    """The replay extension if it was built (whatever MEMLENS_READER says)."""
    return _replay


def native() -> ModuleType | None:
    """The reader extension, or None for the Python path (not built, or switched off)."""
    return None if _python_asked() else _module


def native_replay() -> ModuleType | None:
    """The replay extension, or None for the numpy path (not built, or switched off)."""
    return None if _python_asked() else _replay

"""The compiled helpers, built by setup.py when a C compiler is there: the reader
(memlens.snapshot._fastreader) and the replay (memlens.snapshot._fastreplay). Each is
used unless MEMLENS_READER=python asks for the Python path everywhere (or `python_path`
for one build: MEMLENS_READER=both builds each snapshot both ways, reader_agreement.py)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import ModuleType

READER_ENV = "MEMLENS_READER"  # auto (default) | python | compiled | both
_python_here: ContextVar[bool] = ContextVar("memlens_python_path", default=False)


def _optional(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(f"memlens.snapshot.{name}")
    except ImportError:  # no compiler at install time
        return None


_module = _optional("_fastreader")
_replay = _optional("_fastreplay")


def _asked() -> str:
    return os.environ.get(READER_ENV, "").strip().lower()


def _python_asked() -> bool:
    return _python_here.get() or _asked() == "python"


def both_asked() -> bool:
    """MEMLENS_READER=both: build each snapshot on both paths and compare them."""
    return _asked() == "both"


@contextmanager
def python_path() -> Iterator[None]:
    """The Python path (numpy replay) for what runs inside, whatever MEMLENS_READER says."""
    token = _python_here.set(True)
    try:
        yield
    finally:
        _python_here.reset(token)


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

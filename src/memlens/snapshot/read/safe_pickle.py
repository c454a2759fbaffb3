"""A pickle reader that can only build plain data.

PyTorch writes snapshots with nothing but dicts, lists, tuples, str, int, float, bool and
None, so no GLOBAL/STACK_GLOBAL/EXT/REDUCE opcode is ever needed. We subclass the C
Unpickler (keeping its speed) and refuse every attempt to import anything: REDUCE, BUILD,
NEWOBJ and INST all need a callable that only `find_class` can supply, so refusing there
refuses them all before any code runs. `persistent_load` is refused too.

The C unpickler cannot be interrupted or told a memo size, and a 9-byte file can ask it for
a 4 GB memo table (LONG_BINPUT 2^28). So while it runs, the process's address space may grow
by at most the 'memory' limit (memlens.snapshot.limits): past it, allocations fail with
MemoryError, which we report as that limit. The compiled reader bounds the memo itself.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

from memlens.errors import SnapshotError, UnsafePickleError
from memlens.snapshot.limits import LimitExceeded


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # noqa: D401
        raise UnsafePickleError(
            f"refused to load: the pickle tries to import {module}.{name}; "
            "memory snapshots contain only plain data, so this file is not a safe snapshot "
            "(nothing was executed)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(
            "refused to load: the pickle uses persistent ids, which memory snapshots never do "
            "(nothing was executed)"
        )


def _address_space() -> int | None:
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@contextlib.contextmanager
def address_space_limit(extra: int) -> Iterator[bool]:
    """Let the address space grow by at most `extra` bytes inside the block (Linux, and only
    when this is the only Python thread: the limit is process-wide). Yields whether it is on."""
    if (
        not extra
        or not sys.platform.startswith("linux")
        or threading.active_count() != 1
        or threading.current_thread() is not threading.main_thread()
    ):
        yield False
        return
    import resource

    current = _address_space()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if current is None:
        yield False
        return
    wanted = current + extra
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft <= wanted:
        yield False  # already tighter (e.g. a test's RLIMIT_AS): leave it alone
        return
    resource.setrlimit(resource.RLIMIT_AS, (wanted, hard))
    try:
        yield True
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def load_plain_pickle(stream: IO[bytes], *, what: str = "file", memory_limit: int = 0) -> Any:
    """Unpickle plain data only; anything else raises UnsafePickleError, corruption
    SnapshotError, more than `memory_limit` extra bytes LimitExceeded('memory')."""
    limited = False
    try:
        with address_space_limit(memory_limit) as limited, _quiet_unraisable(limited):
            return _PlainDataUnpickler(stream).load()
    except SnapshotError:
        raise
    except EOFError:
        raise SnapshotError(
            f"{what} is truncated: the pickle ends before its STOP opcode"
        ) from None
    except (MemoryError, SystemError) as exc:
        # at the address-space limit CPython can fail an allocation deep inside a C call
        # and say so as a SystemError ("returned NULL without setting an exception")
        if limited:
            raise LimitExceeded("memory", memory_limit) from None
        if isinstance(exc, SystemError):
            raise
        raise SnapshotError(f"{what}: not enough memory to unpickle it") from None
    except UnicodeDecodeError as exc:
        # protocol 0 text (INST's module name) is ASCII, every other string UTF-8
        code = "ASCII" if exc.encoding == "ascii" else "UTF-8"
        raise SnapshotError(
            f"{what} is not a readable pickle (a string is not valid {code})"
        ) from None
    except (pickle.UnpicklingError, ValueError) as exc:  # worded as the compiled reader does
        raise SnapshotError(f"{what} is not a readable pickle ({str(exc).rstrip('.')})") from None
    except (KeyError, IndexError, TypeError, AttributeError, OverflowError) as exc:
        raise SnapshotError(
            f"{what} is not a readable pickle ({type(exc).__name__}: {exc})"
        ) from None


@contextlib.contextmanager
def _quiet_unraisable(on: bool) -> Iterator[None]:
    """While the address space is limited (the only thread runs), an object freed as an
    allocation fails reports "Exception ignored in ..." on stderr, a line before the one
    error the user is owed: keep such reports to the limit's own error."""
    if not on:
        yield
        return
    previous = sys.unraisablehook
    sys.unraisablehook = lambda _unraisable: None
    try:
        yield
    finally:
        sys.unraisablehook = previous


def loads_plain_pickle(data: bytes, *, what: str = "data", memory_limit: int = 0) -> Any:
    return load_plain_pickle(io.BytesIO(data), what=what, memory_limit=memory_limit)

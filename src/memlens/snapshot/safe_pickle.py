"""A pickle reader that can only build plain data.

PyTorch writes snapshots with nothing but dicts, lists, tuples, str, int, float, bool and
None, so no GLOBAL/STACK_GLOBAL/EXT/REDUCE opcode is ever needed. We subclass the C
Unpickler (keeping its speed) and refuse every attempt to import anything: REDUCE, BUILD,
NEWOBJ and INST all need a callable that only `find_class` can supply, so refusing there
refuses them all before any code runs. `persistent_load` is refused too.
"""

from __future__ import annotations

import io
import pickle
from typing import IO, Any

from memlens.errors import SnapshotError, UnsafePickleError


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


def load_plain_pickle(stream: IO[bytes], *, what: str = "file") -> Any:
    """Unpickle plain data only; anything else raises UnsafePickleError, corruption SnapshotError."""
    try:
        return _PlainDataUnpickler(stream).load()
    except UnsafePickleError:
        raise
    except EOFError:
        raise SnapshotError(
            f"{what} is truncated: the pickle ends before its STOP opcode"
        ) from None
    except (
        pickle.UnpicklingError,
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        AttributeError,
        OverflowError,
        UnicodeDecodeError,
        MemoryError,
    ) as exc:
        raise SnapshotError(
            f"{what} is not a readable pickle ({type(exc).__name__}: {exc})"
        ) from None


def loads_plain_pickle(data: bytes, *, what: str = "data") -> Any:
    return load_plain_pickle(io.BytesIO(data), what=what)

"""Say plainly what a file is when it is not a pickle, before the pickle scan reads it.

Every byte is some pickle opcode, so a text file handed to the scan is read as opcodes and
refused for the first one that could call code (a CSV's `o` is OBJ): the user is told of
an attack when they only passed the wrong file. A pickle of protocol 2 or later starts with
PROTO (0x80), which no text starts with; one of protocol 0 or 1 ends with STOP (`.`) and is
a dict or list, so it starts with MARK, EMPTY_DICT or EMPTY_LIST, or with the GLOBAL or
MARK of a hostile file, which the scan must still see and refuse. Anything else is named
here (a zip archive, text, binary data; empty files and JSON are told apart before this)
and never scanned. Cost: the first and last bytes, and at most 4 KiB decoded.
"""

from __future__ import annotations

from typing import Any

from memlens.errors import SnapshotError

PROTO = 0x80
# what a protocol 0/1 snapshot (a dict or a list) or a refused import starts with
_PICKLE_STARTS = frozenset(b"(}]ci")
_ZIP_MAGIC = b"PK\x03\x04"
_PEEK = 4096
_ADVICE = (
    "a memory snapshot is the pickle written by torch.cuda.memory._dump_snapshot (or its JSON)"
)


def refuse_non_pickle(data: Any, what: str) -> None:
    """Raise SnapshotError naming the format of `data` when it cannot be a pickle; return
    when it may be one (the scan and the unpickler then decide)."""
    head = bytes(data[:_PEEK])
    if head[:1] and head[0] == PROTO:
        return
    if head.startswith(_ZIP_MAGIC):
        raise SnapshotError(
            f"{what} is not a pickle: it is a zip archive (torch.save writes those); {_ADVICE}"
        )
    if bytes(data[-1:]) == b"." and head[0] in _PICKLE_STARTS:
        return
    raise SnapshotError(f"{what} is not a pickle: it looks like {_kind(head)}; {_ADVICE}")


def _kind(head: bytes) -> str:
    """'text' when the first bytes decode as UTF-8 (a cut last character allowed) with no
    control characters but whitespace, else 'binary data'."""
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:
            return "binary data"
        text = head[: exc.start].decode("utf-8")
    if all(c.isprintable() or c in "\t\n\r" for c in text):
        return "text"
    return "binary data"

"""The compiled snapshot reader: when it is used, and how its columns become events.

`memlens.snapshot._fastreader` (C, built by setup.py when a compiler is present) walks a
pickle's opcodes itself and returns the top-level dict with each device trace as columns
(`Columns`): no dict per event is ever built. The small parts (segments, settings,
annotations, the shared frame lists) come back as the plain objects the restricted
unpickler would build, so `builder` turns both paths into the same snapshot. Each column
arrives with its distinct values in first-use order, and those go through the builder's
own coding functions, so string, stack and action ids are assigned in the same order.

Whenever a file is shaped in a way the C reader does not type (protocol 0/1 opcodes, legacy
cpp_frames, non-integer fields, entries shared by memo, ...) it
declines and the Python path reads the file instead: a fallback costs time, never a
different answer. MEMLENS_READER=python forces the Python path; =compiled fails when the
extension is not built; =both reads each file both ways and compares (reader_agreement.py).
"""

from __future__ import annotations

import mmap
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from memlens.errors import SnapshotError
from memlens.snapshot.actions import Action
from memlens.snapshot.assemble.builder import build_snapshot
from memlens.snapshot.assemble.checks import check_sizes
from memlens.snapshot.assemble.context import BuildContext
from memlens.snapshot.assemble.entries import (
    KNOWN_ENTRY_FIELDS,
    coded,
    event_columns,
    no_pools,
    optional_string_ids,
    pool_ids,
    warn_unknown_entry_fields,
)
from memlens.snapshot.limits import RULES, LimitExceeded, Limits, limits_for
from memlens.snapshot.model import Snapshot
from memlens.snapshot.native import READER_ENV as READER_ENV  # part of this interface
from memlens.snapshot.read import prescan
from memlens.snapshot.read.reader import normalize_top_level, open_data
from memlens.snapshot.read.safe_pickle import loads_plain_pickle

try:
    from memlens.snapshot import _fastreader
except ImportError:  # built without a C compiler: the Python path reads everything
    _fastreader = None  # type: ignore[assignment]

# Below this size the Python path is fast enough that its use is not worth a remark.
LARGE_FILE = 64 << 20
PROTO = b"\x80"  # protocol 2+ pickles start with PROTO; older ones go the Python way
NO_LIMIT = 1 << 62

_told_slow = False


def available() -> bool:
    return _fastreader is not None


def mode() -> str:
    value = os.environ.get(READER_ENV, "auto").strip().lower() or "auto"
    if value not in ("auto", "python", "compiled", "both"):
        raise SnapshotError(f"{READER_ENV}={value!r}: use auto, python, compiled or both")
    if value == "compiled" and not available():
        raise SnapshotError(
            f"{READER_ENV}=compiled, but the compiled reader is not built "
            "(reinstall memlens with a C compiler and zlib headers present)"
        )
    return value


def load_compiled(path: Path, warn: Any) -> Snapshot | None:
    """The snapshot at `path` through the compiled reader, or None for the Python path."""
    if mode() == "python":
        return None
    if not available():
        _tell_slow(path)
        return None
    name = str(path)
    got = read_compiled(path, name)
    if got is None:
        return None
    raw, limits = got
    top = normalize_top_level(raw, name, warn)
    top["device_traces"] = [
        CompiledTrace(t.export()) if isinstance(t, _fastreader.Columns) else t
        for t in top["device_traces"]
    ]
    return build_snapshot(top, name, warn, limits)


def _tell_slow(path: Path) -> None:
    global _told_slow
    try:
        large = path.stat().st_size >= LARGE_FILE
    except OSError:
        return
    if large and not _told_slow:
        _told_slow = True
        print(
            "memlens: the compiled snapshot reader is not built (no C compiler at install "
            "time), so large files load several times slower; see docs/benchmarks.md",
            file=sys.stderr,
        )


def read_compiled(path: Path, name: str) -> tuple[Any, Limits] | None:
    """(top-level object with device traces as Columns, limits to build it with), or None
    when the file is for the Python path (not a protocol 2+ pickle, or a shape the C reader
    declines). The bytes come from the function the Python path uses (reader.open_data),
    and pass the same scan (prescan.check): both readers refuse the same files alike."""
    try:
        with open_data(path) as (data, what, memory_limit):
            if data[:1] != PROTO:
                return None
            return _read(data, name, what, memory_limit)
    except OSError:
        return None  # the Python path says what is wrong, in its words


def _read(data: Any, name: str, what: str, memory_limit: int) -> tuple[Any, Limits] | None:
    """The C reader over `data`, with the scan (prescan) in the same pass, just ahead of it:
    the scan's answer comes first, as it does on the Python path."""
    size = len(data)
    lim = limits_for(size)
    # The C reader's own memory stays near the file's size: its memo (8 bytes an entry)
    # and stack (16) get at most a quarter and an eighth of an entry per byte. PyTorch's
    # pickles need far less; a file that needs more is left to the Python path, whose
    # answer is the same (the 'memo' limit is checked by the scan, for both).
    memo_cap, stack_cap = max(1 << 20, size // 4), max(1 << 16, size // 8)
    max_stack = min(lim.items or NO_LIMIT, stack_cap)
    try:
        raw = _fastreader.read(
            data,
            KNOWN_ENTRY_FIELDS,
            memo_cap,
            max_stack,
            lim.depth or NO_LIMIT,
            NO_LIMIT,
            lim.text or NO_LIMIT,
            memory_limit,
            lim.memo,
            prescan.COSTS,
            isinstance(data, mmap.mmap),  # pages passed may go back (RSS), not bytes
        )
    except _fastreader.ScanStop as exc:
        prescan.raise_for(exc.args, what=what, memory_limit=memory_limit, memo_limit=lim.memo)
        raise AssertionError("unreachable") from None
    except _fastreader.Fallback:
        return None
    except _fastreader.Truncated:
        _say_as_python(b"\x80\x02", what)  # EOF before STOP, worded by the unpickler
        raise AssertionError("unreachable") from None
    except _fastreader.Refused as exc:
        raise _refusal(*exc.args, what=what) from None
    except _fastreader.Corrupt as exc:
        raise SnapshotError(f"{what} is not a readable pickle ({exc.args[0]})") from None
    except _fastreader.LimitHit as exc:
        limit_name, value, limit = exc.args
        # the memo is the scan's to bound (the 'memo' limit), for both readers alike
        own = {"memo": True, "stack": stack_cap < (lim.items or NO_LIMIT)}
        if own.get(limit_name):
            return None  # the reader's own bound, not a user limit: the Python path decides
        limit_name = "items" if limit_name == "stack" else limit_name
        if limit_name not in RULES:  # a declared string length past any limit we pass
            raise SnapshotError(
                f"{what} is not a readable pickle (a {limit_name} of {value:,} bytes)"
            ) from None
        raise LimitExceeded(limit_name, limit, f"{value:,} while reading").at(name) from None
    return raw, lim


def _say_as_python(data: bytes, what: str) -> None:
    """Raise the restricted unpickler's own error for `data`, the smallest pickle that fails
    the same way: both readers then word a refusal or a truncation identically."""
    loads_plain_pickle(data, what=what)


def _refusal(op: str, proto: int, module: Any, name: Any, *, what: str) -> Exception:
    """The restricted unpickler's own words for GLOBAL/INST (given the bytes after the
    opcode: it names what they import, or says why they are not names) and STACK_GLOBAL
    (given its two strings), or the scan's for the other refused opcodes."""
    header = b"\x80" + bytes([max(2, min(proto, 5))])
    if op in ("GLOBAL", "INST") and isinstance(module, bytes):
        synthetic = header + (b"(i" if op == "INST" else b"c") + module
    elif isinstance(module, str) and isinstance(name, str):  # STACK_GLOBAL, as it was
        synthetic = header + _binunicode(module) + _binunicode(name) + b"\x93."
    else:
        return prescan.refusal(op)
    try:
        _say_as_python(synthetic, what)
    except SnapshotError as exc:  # UnsafePickleError, or the words of a bad name
        return exc
    return prescan.refusal(op)


def _binunicode(s: str) -> bytes:
    raw = s.encode("utf-8", "surrogatepass")
    return b"X" + len(raw).to_bytes(4, "little") + raw


class CompiledTrace:
    """One device's trace as the C reader left it; builder calls build_events."""

    def __init__(self, cols: dict[str, Any]) -> None:
        self.cols = cols

    def _array(self, key: str, dtype: Any) -> np.ndarray:
        return np.frombuffer(self.cols[key], dtype=dtype)

    def build_events(self, device: int, ctx: BuildContext) -> dict[str, np.ndarray]:
        """The event columns entries.build_events makes from the same entries: each
        coded column goes through the same function, on its distinct values in first-use
        order (so every id is handed out in the same order), then is scattered back."""
        c = self.cols
        n = c["n"]
        ctx.budget.charge(n + c["total_keys"], f"device {device} trace entries")
        warn_unknown_entry_fields(set(c["unknown_fields"]), ctx)
        action = coded(c["actions"], ctx.action_code, np.uint8)[self._array("action", np.uint8)]
        addr = self._array("addr", np.uint64)
        size = self._array("size", np.int64)
        check_sizes(size, f"device {device}: trace entry", "size")
        free_rows = self._array("device_free_row", np.int64)
        if len(free_rows):  # oom entries keep the free device bytes where addr would be
            oom = action[free_rows] == Action.OOM
            addr[free_rows[oom]] = self._array("device_free", np.uint64)[oom]
        stream = coded(c["streams"], ctx.stream_id, np.int32)[self._array("stream", np.int32)]
        if "time_us" in c:
            time_us = self._array("time_us", np.int64)
        else:
            time_us = np.full(n, -1, dtype=np.int64)
        # one list per distinct stack; the reader counted the items of every frames list
        # object it read, which is what the Python path charges
        ctx.budget.charge(c["frames_items"], "stack frames")
        stacks = ctx.stacks.stack_ids(c["frames_objects"], charge=False)
        for obj, local in c["frames_aliases"]:
            ctx.stacks.alias(obj, int(stacks[local]))
        stack = stacks[self._array("frames", np.int32)]

        # forward_frames lists arrive joined; their items are charged as the Python path does
        ctx.budget.charge(c["forward_frames_items"], "forward_frames")
        ctx.budget.charge_text(c["forward_frames_chars"], "forward_frames")

        def optional(key: str) -> np.ndarray:
            if key not in c:
                return np.full(n, -1, dtype=np.int32)
            ids: np.ndarray = optional_string_ids(c[f"{key}_values"], key, ctx)
            out: np.ndarray = ids[self._array(key, np.int32)]
            return out

        if "pool_id" in c:
            rows = self._array("pool_id", np.int32)
            pool = pool_ids(c["pool_id_values"], device, ctx, rows)[rows]
        else:
            pool = no_pools(n)
        return event_columns(action, addr, size, stream, time_us, stack, pool, optional)

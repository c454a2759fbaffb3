"""Trace entries (dicts, as the restricted unpickler builds them) into event columns: one
pass per field with C-speed iteration (itemgetter, fromiter), then numpy. The coding of
values into ids (coded, optional_string_ids) is shared with the compiled reader."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np

from memlens.errors import SnapshotError
from memlens.snapshot.actions import Action
from memlens.snapshot.assemble.checks import UINT64, check_sizes, checked_int, first_bad, glimpse
from memlens.snapshot.assemble.context import BadPool, BuildContext

KNOWN_ENTRY_FIELDS = {
    "action", "addr", "size", "stream", "time_us", "frames", "compile_context",
    "user_metadata", "forward_frames", "device_free", "cpp_frames", "category",
    "pool_id", "internal_metadata", "device", "real_size",
}  # fmt: skip
# The fields the compiled reader types into columns, in the order of its field enum: the C
# side is generated from this tuple (scripts/gen_c_contract.py -> csrc/contract.h).
TYPED_ENTRY_FIELDS = (
    "action", "addr", "size", "stream", "time_us", "frames", "compile_context",
    "user_metadata", "forward_frames", "device_free", "pool_id",
)  # fmt: skip


def _int_column(values: list[Any], dtype: Any, what: str, device: int) -> np.ndarray:
    try:
        if all(isinstance(v, int) for v in values):  # no float/str silently converted
            return np.asarray(values, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        pass
    info = np.iinfo(dtype)
    for i, v in enumerate(values):
        checked_int(
            v, f"device {device}: trace entry {i}: {what!r}", (int(info.min), int(info.max))
        )
    raise SnapshotError(f"device {device}: trace field {what!r} cannot be read as integers")


def _column(trace: list[dict[str, Any]], key: str, default: Any) -> list[Any]:
    """One field of every entry; itemgetter runs in C, .get only when some entry lacks it."""
    try:
        return list(map(itemgetter(key), trace))
    except KeyError:
        return [e.get(key, default) for e in trace]


def _int_field(
    trace: list[dict[str, Any]], key: str, default: int, dtype: Any, device: int
) -> np.ndarray:
    """An integer field straight into numpy (no intermediate list) when every entry has it."""
    try:
        values = list(map(itemgetter(key), trace))
        if set(map(type, values)) <= {int}:
            return np.fromiter(values, dtype=dtype, count=len(trace))
        return _int_column(values, dtype, key, device)
    except (KeyError, TypeError, ValueError, OverflowError):
        return _int_column([e.get(key, default) for e in trace], dtype, key, device)


def coded(values: list[Any], code_of: Callable[[Any], int], dtype: Any) -> np.ndarray:
    """Map a column with few distinct values through `code_of`, calling it once per value,
    in order of first use (the ids code_of hands out must not depend on hashing, and the
    compiled reader passes its distinct values in that order)."""
    try:
        distinct = dict.fromkeys(values)
    except TypeError:  # unhashable values (dict metadata): map them one by one
        return np.asarray([code_of(v) for v in values], dtype=dtype)
    table = {v: code_of(v) for v in distinct}
    return np.fromiter(map(table.__getitem__, values), dtype=dtype, count=len(values))


def build_events(trace: list[Any], device: int, ctx: BuildContext) -> dict[str, np.ndarray]:
    n = len(trace)
    if n and set(map(type, trace)) != {dict}:
        bad = next(e for e in trace if not isinstance(e, dict))
        raise SnapshotError(
            f"device {device}: trace entry is a {type(bad).__name__}, expected a dict"
        )
    # entries may be one dict shared a million times: what we walk is what we count
    ctx.budget.charge(n + sum(map(len, trace)), f"device {device} trace entries")
    keys = set(itertools.chain.from_iterable(trace))
    warn_unknown_entry_fields(keys, ctx)
    if n and "action" not in keys:
        raise SnapshotError(f"device {device}: trace entries have no 'action' field")

    actions = _column(trace, "action", None)
    if n and (first := first_bad(actions, str)) is not None:
        i, bad = first
        raise SnapshotError(
            f"device {device}: trace entry {i}: action is a {type(bad).__name__} "
            f"({glimpse(bad)}), expected a string"
        )
    action = coded(actions, ctx.action_code, np.uint8)
    addr = _int_field(trace, "addr", 0, np.uint64, device)
    size = _int_field(trace, "size", 0, np.int64, device)
    check_sizes(size, f"device {device}: trace entry", "size")
    for r in np.flatnonzero(
        action == Action.OOM
    ):  # free device bytes are stored where addr would be
        free = trace[r].get("device_free", trace[r].get("addr", 0))
        addr[r] = checked_int(
            0 if free is None else free, f"device {device}: trace entry {r}: 'device_free'", UINT64
        )
    streams = _column(trace, "stream", 0)
    if n and (first := first_bad(streams, (int, type(None)))) is not None:
        i, bad = first
        raise SnapshotError(
            f"device {device}: trace entry {i}: stream is a {type(bad).__name__} "
            f"({glimpse(bad)}), expected an integer"
        )
    stream = coded(streams, ctx.stream_id, np.int32)
    if "time_us" in keys:
        time_us = _int_field(trace, "time_us", -1, np.int64, device)
    else:
        time_us = np.full(n, -1, dtype=np.int64)
    if "cpp_frames" in keys:  # legacy 1.13/2.0 entries: Python frames, then C++ frames
        stack = ctx.stacks.stack_ids([legacy_frames(e) for e in trace])
    else:
        stack = ctx.stacks.stack_ids(_column(trace, "frames", None))

    def optional_strings(key: str) -> np.ndarray:
        if key not in keys:
            return np.full(n, -1, dtype=np.int32)
        return optional_string_ids(_column(trace, key, None), key, ctx)

    if "pool_id" in keys:
        pool = pool_ids(_column(trace, "pool_id", None), device, ctx)
    else:
        pool = no_pools(n)
    return event_columns(action, addr, size, stream, time_us, stack, pool, optional_strings)


# Why a pool index per event, int16, into one table of pairs (Snapshot.pools): a process has
# a handful of pools (the default one, one per CUDA graph pool or MemPool) and millions of
# events, so 2 bytes an event, where a pair of int64s would be 16; and per event rather than
# only on segment events, because an allocation's own entry names its pool even when its
# segment's events fell out of the ring buffer. A trace without pool_id (PyTorch before
# entries carried it) costs nothing: one -1 seen n times (a read-only broadcast view).
def no_pools(n: int) -> np.ndarray:
    """The pool column of n entries that do not say their pool (-1: unknown)."""
    return np.broadcast_to(np.int16(-1), (n,))


def pool_ids(
    values: list[Any], device: int, ctx: BuildContext, rows: np.ndarray | None = None
) -> np.ndarray:
    """Indexes into ctx.pools of pool_id values (-1 for None): one per entry, or (the
    compiled reader) the distinct values of a column `rows` indexes. A value that is not a
    pair of integers is a SnapshotError naming the first entry that has it."""
    given = values
    if list in set(map(type, values)):  # a JSON layout's pairs: hashable, as tuples
        values = [tuple(v) if isinstance(v, list) else v for v in values]
    try:
        return coded(values, ctx.pool_id, np.int16)
    except BadPool as exc:
        k = next(i for i, v in enumerate(values) if v is exc.args[0])
        bad = given[k]
        row = k if rows is None else int(np.flatnonzero(rows == k)[0])
        raise SnapshotError(
            f"device {device}: trace entry {row}: pool_id is a {type(bad).__name__} "
            f"({glimpse(bad)}), expected a pair of integers"
        ) from None


# the optional string fields of an entry: (column, entry key)
OPTIONAL_STRINGS = (
    ("compile_context", "compile_context"),
    ("user_metadata", "user_metadata"),
    ("forward_stack", "forward_frames"),
)


def event_columns(
    action: np.ndarray,
    addr: np.ndarray,
    size: np.ndarray,
    stream: np.ndarray,
    time_us: np.ndarray,
    stack: np.ndarray,
    pool: np.ndarray,
    optional: Callable[[str], np.ndarray],
) -> dict[str, np.ndarray]:
    """A device's event columns as both readers hand them to the builder; `optional(key)`
    gives the string ids of an optional entry field (-1 where absent)."""
    columns = {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": stream,
        "time_us": time_us,
        "stack": stack,
        "pool": pool,
    }
    for column, key in OPTIONAL_STRINGS:
        columns[column] = optional(key)
    return columns


# what each optional per-entry text field holds when it is empty
OPTIONAL_STRING_EMPTY: dict[str, Any] = {
    "compile_context": "N/A",
    "user_metadata": "",
    "forward_frames": [],
}


def optional_string_ids(values: list[Any], key: str, ctx: BuildContext) -> np.ndarray:
    """String ids of an optional text field's values (-1 for empty or missing). Also used
    by the compiled reader on the distinct values of a column, in first-use order."""
    empty = OPTIONAL_STRING_EMPTY[key]

    def code(v: Any) -> int:
        if v is None or (isinstance(v, (str, list)) and (v == empty or v == "")):
            return -1
        if key == "forward_frames" and isinstance(v, list) and set(map(type, v)) <= {str}:
            ctx.budget.charge(len(v), "forward_frames")
            ctx.budget.charge_text(sum(map(len, v)), "forward_frames")  # before joining
            return ctx.strings("".join(v))
        return ctx.strings(v)  # str as is; anything else as bounded JSON text

    if set(map(type, values)) <= {str, type(None)}:
        return coded(values, code, np.int32)
    # dicts, lists (forward_frames), or junk: intern by object identity like stacks,
    # so a shared value is converted once and nothing unhashable or deep is hashed
    obj_ids = np.fromiter(map(id, values), dtype=np.uint64, count=len(values))
    uniq, first, inverse = np.unique(obj_ids, return_index=True, return_inverse=True)
    # in order of first use, not of memory address: string ids must not vary between loads
    order = np.argsort(first, kind="stable")
    table = np.empty(len(uniq), dtype=np.int32)
    table[order] = np.fromiter(
        (code(values[i]) for i in first[order].tolist()), dtype=np.int32, count=len(uniq)
    )
    return table[inverse.reshape(-1)]


def warn_unknown_entry_fields(keys: set[Any], ctx: BuildContext) -> None:
    unknown = sorted(str(k) for k in keys - KNOWN_ENTRY_FIELDS)
    if unknown:
        ctx.warn(
            "entry-fields", f"unknown trace-entry fields kept going past: {', '.join(unknown)}"
        )


def legacy_frames(e: dict[str, Any]) -> Any:
    py, cpp = e.get("frames") or [], e.get("cpp_frames") or []
    return (list(py) + list(cpp)) if cpp else (py or None)

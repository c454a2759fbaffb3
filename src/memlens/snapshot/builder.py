"""Build the columnar model from the raw (unpickled) structure.

This is the hot path of a cold load: one pass per field over the trace entries with list
comprehensions (C-speed iteration), then numpy conversion. Nothing here keeps a Python
object per event after it returns.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np

from memlens.errors import SnapshotError
from memlens.snapshot.actions import BLOCK_STATES, KNOWN_ACTIONS, Action
from memlens.snapshot.annotations import Annotations, annotation_columns
from memlens.snapshot.checks import (
    INT64,
    MAX_SIZE,
    MAX_TOTAL,
    SIZE,
    UINT64,
    check_sizes,
    check_total,
    checked_int,
    first_bad,
    glimpse,
)
from memlens.snapshot.interning import FrameTable, StackTable, StringTable, as_text
from memlens.snapshot.limits import Budget, LimitExceeded, Limits, bounded_walk, unlimited
from memlens.snapshot.model import DeviceTrace, Frames, Segments, Snapshot, Stacks
from memlens.snapshot.replay import replay_device

KNOWN_ENTRY_FIELDS = {
    "action", "addr", "size", "stream", "time_us", "frames", "compile_context",
    "user_metadata", "forward_frames", "device_free", "cpp_frames", "category",
    "pool_id", "internal_metadata", "device", "real_size",
}  # fmt: skip
KNOWN_SEGMENT_FIELDS = {
    "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
    "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks",
}  # fmt: skip
KNOWN_BLOCK_FIELDS = {
    "address",
    "size",
    "requested_size",
    "state",
    "frames",
    "history",
    "real_size",
    "cpp_frames",
}

Warn = Callable[[str, str], None]


class _Context:
    def __init__(self, warn: Warn, budget: Budget) -> None:
        self.warn = warn
        self.budget = budget
        self.strings = StringTable(budget)
        self.frames = FrameTable(self.strings)
        self.stacks = StackTable(self.frames)
        self.streams: list[int] = [0]
        self._stream_ids: dict[int, int] = {0: 0}
        self.action_names: list[str] = []
        self.action_codes: dict[str, int] = dict(KNOWN_ACTIONS)

    def stream_id(self, raw: Any) -> int:
        if raw is None:
            raw = 0
        if not isinstance(raw, int):  # also keeps unhashable and deep values out of the dict
            raise SnapshotError(
                f"a stream is a {type(raw).__name__} ({glimpse(raw)}), expected an integer"
            )
        i = self._stream_ids.get(raw)
        if i is None:
            value = checked_int(raw, "a stream", (INT64[0], UINT64[1]))
            i = self._stream_ids.get(value)
            if i is None:
                i = len(self.streams)
                self.streams.append(value)
                self._stream_ids[value] = i
            self._stream_ids[raw] = i
        return i

    def action_code(self, name: Any) -> int:
        code = self.action_codes.get(name)
        if code is None:
            code = Action.FIRST_UNKNOWN + len(self.action_names)
            if code > 255:
                raise SnapshotError("more than 200 distinct unknown trace actions: not a snapshot")
            self.action_names.append(str(name))
            self.action_codes[name] = code
            self.warn(
                f"action:{name}",
                f"unknown trace action {name!r} kept going past (ignored by the replay)",
            )
        return code


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


def _coded(values: list[Any], code_of: Callable[[Any], int], dtype: Any) -> np.ndarray:
    """Map a column with few distinct values through `code_of`, calling it once per value,
    in order of first use (the ids code_of hands out must not depend on hashing, and the
    compiled reader passes its distinct values in that order)."""
    try:
        distinct = dict.fromkeys(values)
    except TypeError:  # unhashable values (dict metadata): map them one by one
        return np.asarray([code_of(v) for v in values], dtype=dtype)
    table = {v: code_of(v) for v in distinct}
    return np.fromiter(map(table.__getitem__, values), dtype=dtype, count=len(values))


def _build_events(trace: list[Any], device: int, ctx: _Context) -> dict[str, np.ndarray]:
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
    action = _coded(actions, ctx.action_code, np.uint8)
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
    stream = _coded(streams, ctx.stream_id, np.int32)
    if "time_us" in keys:
        time_us = _int_field(trace, "time_us", -1, np.int64, device)
    else:
        time_us = np.full(n, -1, dtype=np.int64)
    if "cpp_frames" in keys:  # legacy 1.13/2.0 entries: Python frames, then C++ frames
        stack = ctx.stacks.stack_ids([_legacy_frames(e) for e in trace])
    else:
        stack = ctx.stacks.stack_ids(_column(trace, "frames", None))

    def optional_strings(key: str) -> np.ndarray:
        if key not in keys:
            return np.full(n, -1, dtype=np.int32)
        return optional_string_ids(_column(trace, key, None), key, ctx)

    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": stream,
        "time_us": time_us,
        "stack": stack,
        "compile_context": optional_strings("compile_context"),
        "user_metadata": optional_strings("user_metadata"),
        "forward_stack": optional_strings("forward_frames"),
    }


# what each optional per-entry text field holds when it is empty
OPTIONAL_STRING_EMPTY: dict[str, Any] = {
    "compile_context": "N/A",
    "user_metadata": "",
    "forward_frames": [],
}


def optional_string_ids(values: list[Any], key: str, ctx: _Context) -> np.ndarray:
    """String ids of an optional text field's values (-1 for empty or missing). Also used
    by the compiled reader on the distinct values of a column, in first-use order."""
    empty = OPTIONAL_STRING_EMPTY[key]

    def code(v: Any) -> int:
        if v is None or (isinstance(v, (str, list)) and (v == empty or v == "")):
            return -1
        if key == "forward_frames" and isinstance(v, list) and set(map(type, v)) <= {str}:
            ctx.budget.charge(len(v), "forward_frames")
            return ctx.strings("".join(v))
        return ctx.strings(v)  # str as is; anything else as bounded JSON text

    if set(map(type, values)) <= {str, type(None)}:
        return _coded(values, code, np.int32)
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


def warn_unknown_entry_fields(keys: set[Any], ctx: _Context) -> None:
    unknown = sorted(str(k) for k in keys - KNOWN_ENTRY_FIELDS)
    if unknown:
        ctx.warn(
            "entry-fields", f"unknown trace-entry fields kept going past: {', '.join(unknown)}"
        )


def _legacy_frames(e: dict[str, Any]) -> Any:
    py, cpp = e.get("frames") or [], e.get("cpp_frames") or []
    return (list(py) + list(cpp)) if cpp else (py or None)


def _build_segments(raw_segments: list[Any], ctx: _Context) -> Segments:
    cols: dict[str, list[Any]] = {k: [] for k in (
        "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
        "stream", "is_large", "pool_id0", "pool_id1", "is_expandable", "stack")}  # fmt: skip
    bcols: dict[str, list[Any]] = {
        k: [] for k in ("address", "size", "requested_size", "state", "stack")
    }
    offsets = [0]
    unknown_seg: set[str] = set()
    unknown_blk: set[str] = set()
    stack_id = ctx.stacks.stack_id
    charge = ctx.budget.charge
    for si, seg in enumerate(raw_segments):
        if not isinstance(seg, dict):
            raise SnapshotError(f"a segment is a {type(seg).__name__}, expected a dict")
        where = f"segment {si}"
        unknown_seg.update(str(k) for k in seg if k not in KNOWN_SEGMENT_FIELDS)
        blocks = seg.get("blocks") or []
        if not isinstance(blocks, list):
            raise SnapshotError(f"{where}: blocks is a {type(blocks).__name__}, expected a list")
        # segments may share one block list by memo: each walk of it is counted
        charge(1 + len(seg) + len(blocks), "segments and blocks")
        if not all(isinstance(b, dict) for b in blocks):
            bad = next(b for b in blocks if not isinstance(b, dict))
            raise SnapshotError(f"{where}: a block is a {type(bad).__name__}, expected a dict")
        address = checked_int(seg.get("address", 0), f"{where}: address", UINT64)
        if "total_size" in seg:
            total = checked_int(seg["total_size"], f"{where}: total_size", SIZE)
        else:
            total = sum(checked_int(b.get("size", 0), f"{where}: block size", SIZE) for b in blocks)
        pool = seg.get("segment_pool_id") or (0, 0)
        if not isinstance(pool, (list, tuple)) or len(pool) != 2:
            pool = (0, 0)
        cols["device"].append(checked_int(seg.get("device", 0), f"{where}: device", (0, 1 << 20)))
        cols["address"].append(address)
        cols["total_size"].append(total)
        stream = seg.get("stream", 0)
        cols["stream"].append(ctx.stream_id(stream))
        cols["is_large"].append(seg.get("segment_type", "large") != "small")
        cols["pool_id0"].append(checked_int(pool[0], f"{where}: segment_pool_id", INT64))
        cols["pool_id1"].append(checked_int(pool[1], f"{where}: segment_pool_id", INT64))
        cols["is_expandable"].append(bool(seg.get("is_expandable", False)))
        cols["stack"].append(stack_id(seg.get("frames")))
        offset = address
        alloc_sum = active_sum = req_sum = 0
        for b in blocks:
            charge(len(b), "blocks")
            unknown_blk.update(str(k) for k in b if k not in KNOWN_BLOCK_FIELDS)
            bsize = checked_int(b.get("size", 0), f"{where}: block size", SIZE)
            history = b.get("history") or []
            if not isinstance(history, list):
                history = []
            h0 = history[0] if history and isinstance(history[0], dict) else {}
            req = b.get("requested_size", h0.get("real_size", b.get("real_size", bsize)))
            req = checked_int(req, f"{where}: block requested_size", SIZE)
            state_name = b.get("state", "inactive")
            state = BLOCK_STATES.get(state_name, 0) if isinstance(state_name, str) else 0
            frames = b.get("frames")
            if frames is None and h0:
                frames = _legacy_frames(h0)
            baddr = checked_int(b.get("address", offset), f"{where}: block address", UINT64)
            bcols["address"].append(baddr)
            bcols["size"].append(bsize)
            bcols["requested_size"].append(req)
            bcols["state"].append(state)
            bcols["stack"].append(stack_id(frames))
            offset = baddr + bsize
            if state == 1:
                alloc_sum += bsize
            if state in (1, 2):
                active_sum += bsize
                req_sum += int(req)
        offsets.append(offsets[-1] + len(blocks))
        for key, derived in (
            ("allocated_size", alloc_sum),
            ("active_size", active_sum),
            ("requested_size", req_sum),
        ):
            cols[key].append(checked_int(seg.get(key, derived), f"{where}: {key}", (0, MAX_TOTAL)))
    for key in ("total_size", "allocated_size", "active_size", "requested_size"):
        check_total(cols[key], f"segment {key}s")
    check_total(bcols["size"], "block sizes")
    if unknown_seg:
        ctx.warn(
            "segment-fields",
            f"unknown segment fields kept going past: {', '.join(sorted(unknown_seg))}",
        )
    if unknown_blk:
        ctx.warn(
            "block-fields",
            f"unknown block fields kept going past: {', '.join(sorted(unknown_blk))}",
        )
    return Segments(
        device=np.asarray(cols["device"], dtype=np.int32),
        address=np.asarray(cols["address"], dtype=np.uint64),
        total_size=np.asarray(cols["total_size"], dtype=np.int64),
        allocated_size=np.asarray(cols["allocated_size"], dtype=np.int64),
        active_size=np.asarray(cols["active_size"], dtype=np.int64),
        requested_size=np.asarray(cols["requested_size"], dtype=np.int64),
        stream=np.asarray(cols["stream"], dtype=np.int32),
        is_large=np.asarray(cols["is_large"], dtype=bool),
        pool_id0=np.asarray(cols["pool_id0"], dtype=np.int64),
        pool_id1=np.asarray(cols["pool_id1"], dtype=np.int64),
        is_expandable=np.asarray(cols["is_expandable"], dtype=bool),
        stack=np.asarray(cols["stack"], dtype=np.int32),
        block_offsets=np.asarray(offsets, dtype=np.int64),
        block_address=np.asarray(bcols["address"], dtype=np.uint64),
        block_size=np.asarray(bcols["size"], dtype=np.int64),
        block_requested_size=np.asarray(bcols["requested_size"], dtype=np.int64),
        block_state=np.asarray(bcols["state"], dtype=np.uint8),
        block_stack=np.asarray(bcols["stack"], dtype=np.int32),
    )


def _build_annotations(raw: Any, ctx: _Context) -> Annotations:
    if isinstance(raw, list):
        ctx.budget.charge(len(raw), "external_annotations")
        for i, a in enumerate(raw):
            if isinstance(a, dict):
                where = f"external_annotations[{i}]"
                checked_int(a.get("device", 0) or 0, f"{where}: device", (0, 1 << 20))
                checked_int(a.get("time_us", -1), f"{where}: time_us", INT64)
    return annotation_columns(raw, ctx.strings)


def _checked_replay(t: DeviceTrace, warn: Warn) -> DeviceTrace:
    """Figures the replay derives must be real byte counts too: an OOM's free memory is a
    size, and a reserved curve below zero means the segment events contradict the final
    segments (e.g. segment_free dropped by skip_actions): the curve is lifted to start at
    the least reserved memory that explains the events, with a warning, never shown < 0."""
    oom = t.action == Action.OOM
    if oom.any() and int(t.addr[oom].max()) > MAX_SIZE:
        row = int(np.flatnonzero(oom)[np.argmax(t.addr[oom])])
        raise SnapshotError(
            f"device {t.device}: trace entry {row}: device_free {int(t.addr[row])} is out of "
            f"range (0..{MAX_SIZE})"
        )
    low = min(
        int(t.reserved_start_bytes), int(t.reserved_after.min()) if len(t.reserved_after) else 0
    )
    if low < 0:
        t.reserved_after = t.reserved_after - low
        t.reserved_start_bytes = int(t.reserved_start_bytes) - low
        warn(
            f"reserved-lift:{t.device}",
            f"device {t.device}: the segment events do not add up to the segments at the end "
            f"(a segment_free or segment_unmap missing?); reserved memory lifted by {-low:,} "
            "bytes so it never goes below 0",
        )
    return t


def build_snapshot(
    top: dict[str, Any], source: str, warn: Warn, limits: Limits | None = None
) -> Snapshot:
    """Columns from the normalized raw dict (see reader.normalize_top_level); the work is
    bounded by `limits` (memlens.snapshot.limits; by default only the absolute caps)."""
    try:
        return _build_snapshot(top, source, warn, Budget(limits or unlimited()))
    except LimitExceeded as exc:
        raise exc.at(source) from None
    except SnapshotError as exc:  # say which file, once
        if str(exc).startswith(source):
            raise
        raise SnapshotError(f"{source}: {exc}") from None


def _build_snapshot(top: dict[str, Any], source: str, warn: Warn, budget: Budget) -> Snapshot:
    ctx = _Context(warn, budget)
    traces_raw = top["device_traces"]
    budget.charge(len(traces_raw) + len(top["segments"]), "top-level lists")
    events_per_device = {}
    for device, trace in enumerate(traces_raw):
        prebuilt = getattr(trace, "build_events", None)  # columns from the compiled reader
        if prebuilt is not None:
            events_per_device[device] = prebuilt(device, ctx)
            continue
        if trace is None:
            trace = []
        if not isinstance(trace, list):
            raise SnapshotError(
                f"device_traces[{device}] is a {type(trace).__name__}, expected a list"
            )
        events_per_device[device] = _build_events(trace, device, ctx)
    segments = _build_segments(top["segments"], ctx)
    annotations = _build_annotations(top.get("external_annotations"), ctx)
    settings = top.get("allocator_settings") or {}
    if not isinstance(settings, dict):
        settings = {}
    bounded_walk(settings, budget, "allocator_settings")
    notes = []
    if any(
        "history" in b
        for s in top["segments"]
        if isinstance(s, dict)
        for b in (s.get("blocks") or [])
        if isinstance(b, dict)
    ):
        notes.append("legacy block history (PyTorch 1.13/2.0 layout)")
    if not traces_raw:
        notes.append(
            "no device_traces: segments only (torch.cuda.memory_snapshot() list or history not recorded)"
        )

    snap = Snapshot(
        source=source,
        strings=ctx.strings.strings,
        frames=Frames(**ctx.frames.arrays()),
        stacks=Stacks(**ctx.stacks.arrays()),
        streams=ctx.streams,
        segments=segments,
        annotations=annotations,
        allocator_settings=_jsonable(settings),
        action_names=ctx.action_names,
        format_notes=notes,
    )
    seg_devices = {int(d) for d in np.unique(segments.device)}
    for device in sorted(set(events_per_device) | seg_devices):
        ev = events_per_device.get(device) or _build_events([], device, ctx)
        snap.traces[device] = _checked_replay(replay_device(snap, device, ev, warn), warn)
    return snap


def _jsonable(v: Any) -> Any:
    """Plain JSON data (walked with bounded_walk first, so bounded). Integers past int64 and
    non-finite floats become text: the cache's JSON and the viewer must read them back."""
    if isinstance(v, dict):
        return {as_text(k, Budget(unlimited()), "a key"): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, int) and not isinstance(v, bool) and not INT64[0] <= v <= INT64[1]:
        return glimpse(v)
    if isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)

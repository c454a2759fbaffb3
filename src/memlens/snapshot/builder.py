"""Build the columnar model from the raw (unpickled) structure.

This is the hot path of a cold load: one pass per field over the trace entries with list
comprehensions (C-speed iteration), then numpy conversion. Nothing here keeps a Python
object per event after it returns.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np

from memlens.errors import SnapshotError
from memlens.snapshot.actions import BLOCK_STATES, KNOWN_ACTIONS, Action
from memlens.snapshot.annotations import Annotations, annotation_columns
from memlens.snapshot.interning import FrameTable, StackTable, StringTable
from memlens.snapshot.model import Frames, Segments, Snapshot, Stacks
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
    def __init__(self, warn: Warn) -> None:
        self.warn = warn
        self.strings = StringTable()
        self.frames = FrameTable(self.strings)
        self.stacks = StackTable(self.frames)
        self.streams: list[int] = [0]
        self._stream_ids: dict[int, int] = {0: 0}
        self.action_names: list[str] = []
        self.action_codes: dict[str, int] = dict(KNOWN_ACTIONS)

    def stream_id(self, raw: Any) -> int:
        i = self._stream_ids.get(raw)
        if i is None:
            try:
                value = int(raw)
            except (TypeError, ValueError):
                value = 0
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
        return np.asarray(values, dtype=dtype)
    except (TypeError, ValueError, OverflowError):
        bad = next((v for v in values if not isinstance(v, int) or isinstance(v, bool)), None)
        raise SnapshotError(
            f"device {device}: trace field {what!r} holds a non-integer value ({bad!r})"
        ) from None


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
        return np.fromiter(map(itemgetter(key), trace), dtype=dtype, count=len(trace))
    except (KeyError, TypeError, ValueError, OverflowError):
        return _int_column([e.get(key, default) for e in trace], dtype, key, device)


def _coded(values: list[Any], code_of: Callable[[Any], int], dtype: Any) -> np.ndarray:
    """Map a column with few distinct values through `code_of`, calling it once per value."""
    try:
        distinct = set(values)
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
    keys = set(itertools.chain.from_iterable(trace))
    unknown = sorted(str(k) for k in keys - KNOWN_ENTRY_FIELDS)
    if unknown:
        ctx.warn(
            "entry-fields", f"unknown trace-entry fields kept going past: {', '.join(unknown)}"
        )
    if n and "action" not in keys:
        raise SnapshotError(f"device {device}: trace entries have no 'action' field")

    action = _coded(_column(trace, "action", None), ctx.action_code, np.uint8)
    addr = _int_field(trace, "addr", 0, np.uint64, device)
    size = _int_field(trace, "size", 0, np.int64, device)
    for r in np.flatnonzero(
        action == Action.OOM
    ):  # free device bytes are stored where addr would be
        addr[r] = int(trace[r].get("device_free", trace[r].get("addr", 0)) or 0)
    stream = _coded(_column(trace, "stream", 0), ctx.stream_id, np.int32)
    if "time_us" in keys:
        time_us = _int_field(trace, "time_us", -1, np.int64, device)
    else:
        time_us = np.full(n, -1, dtype=np.int64)
    if "cpp_frames" in keys:  # legacy 1.13/2.0 entries: Python frames, then C++ frames
        stack = ctx.stacks.stack_ids([_legacy_frames(e) for e in trace])
    else:
        stack = ctx.stacks.stack_ids(_column(trace, "frames", None))

    def optional_strings(key: str, empty: Any) -> np.ndarray:
        if key not in keys:
            return np.full(n, -1, dtype=np.int32)

        def code(v: Any) -> int:
            if v is None or v == empty or v == "":
                return -1
            return ctx.strings("".join(v) if key == "forward_frames" and isinstance(v, list) else v)

        values = _column(trace, key, None)
        if key == "forward_frames":  # lists: intern by object identity like stacks
            return _coded(
                [tuple(v) if isinstance(v, list) else v for v in values],
                lambda t: code(list(t) if isinstance(t, tuple) else t),
                np.int32,
            )
        return _coded(values, code, np.int32)

    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": stream,
        "time_us": time_us,
        "stack": stack,
        "compile_context": optional_strings("compile_context", "N/A"),
        "user_metadata": optional_strings("user_metadata", ""),
        "forward_stack": optional_strings("forward_frames", []),
    }


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
    for seg in raw_segments:
        if not isinstance(seg, dict):
            raise SnapshotError(f"a segment is a {type(seg).__name__}, expected a dict")
        unknown_seg.update(str(k) for k in seg if k not in KNOWN_SEGMENT_FIELDS)
        blocks = seg.get("blocks") or []
        try:
            address = int(seg.get("address", 0))
            total = int(seg.get("total_size", sum(int(b.get("size", 0)) for b in blocks)))
        except (TypeError, ValueError, AttributeError):
            raise SnapshotError("a segment has a non-integer address or total_size") from None
        pool = seg.get("segment_pool_id") or (0, 0)
        if not isinstance(pool, (list, tuple)) or len(pool) != 2:
            pool = (0, 0)
        cols["device"].append(int(seg.get("device", 0)))
        cols["address"].append(address)
        cols["total_size"].append(total)
        cols["stream"].append(ctx.stream_id(seg.get("stream", 0)))
        cols["is_large"].append(seg.get("segment_type", "large") != "small")
        cols["pool_id0"].append(int(pool[0]))
        cols["pool_id1"].append(int(pool[1]))
        cols["is_expandable"].append(bool(seg.get("is_expandable", False)))
        cols["stack"].append(stack_id(seg.get("frames")))
        offset = address
        alloc_sum = active_sum = req_sum = 0
        for b in blocks:
            if not isinstance(b, dict):
                raise SnapshotError(f"a block is a {type(b).__name__}, expected a dict")
            unknown_blk.update(str(k) for k in b if k not in KNOWN_BLOCK_FIELDS)
            bsize = int(b.get("size", 0))
            history = b.get("history") or []
            h0 = history[0] if history and isinstance(history[0], dict) else {}
            req = b.get("requested_size", h0.get("real_size", b.get("real_size", bsize)))
            state = BLOCK_STATES.get(b.get("state", "inactive"), 0)
            frames = b.get("frames")
            if frames is None and h0:
                frames = _legacy_frames(h0)
            baddr = int(b.get("address", offset))
            bcols["address"].append(baddr)
            bcols["size"].append(bsize)
            bcols["requested_size"].append(int(req))
            bcols["state"].append(state)
            bcols["stack"].append(stack_id(frames))
            offset = baddr + bsize
            if state == 1:
                alloc_sum += bsize
            if state in (1, 2):
                active_sum += bsize
                req_sum += int(req)
        offsets.append(offsets[-1] + len(blocks))
        cols["allocated_size"].append(int(seg.get("allocated_size", alloc_sum)))
        cols["active_size"].append(int(seg.get("active_size", active_sum)))
        cols["requested_size"].append(int(seg.get("requested_size", req_sum)))
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
    return annotation_columns(raw, ctx.strings)


def build_snapshot(top: dict[str, Any], source: str, warn: Warn) -> Snapshot:
    """Columns from the normalized raw dict (see reader.normalize_top_level)."""
    ctx = _Context(warn)
    traces_raw = top["device_traces"]
    events_per_device = {}
    for device, trace in enumerate(traces_raw):
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
        snap.traces[device] = replay_device(snap, device, ev, warn)
    return snap


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)

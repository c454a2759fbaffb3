"""Build the columnar model from the raw (unpickled) structure: each device's events
(entries.py, or the compiled reader's columns), the final segments, the annotations, then
the replay. Nothing here keeps a Python object per event after it returns.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

from memlens.errors import SnapshotError
from memlens.snapshot.actions import BLOCK_STATES, Action
from memlens.snapshot.annotations import Annotations, annotation_columns
from memlens.snapshot.assemble.checks import (
    INT64,
    MAX_SIZE,
    MAX_TOTAL,
    SIZE,
    UINT64,
    check_total,
    checked_int,
    glimpse,
)
from memlens.snapshot.assemble.context import BuildContext, Warn
from memlens.snapshot.assemble.entries import build_events, legacy_frames
from memlens.snapshot.assemble.interning import as_text
from memlens.snapshot.limits import Budget, LimitExceeded, Limits, bounded_walk, unlimited
from memlens.snapshot.model import DeviceTrace, Frames, Segments, Snapshot, Stacks
from memlens.snapshot.replay.device import replay_device

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


def _build_segments(raw_segments: list[Any], ctx: BuildContext) -> Segments:
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
                frames = legacy_frames(h0)
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


def _build_annotations(raw: Any, ctx: BuildContext) -> Annotations:
    if not isinstance(raw, list):
        return annotation_columns(raw, ctx.strings)
    ctx.budget.charge(len(raw), "external_annotations")
    annotations = None
    if not _has_non_int(raw):
        with contextlib.suppress(SnapshotError):  # a time past int64: said below
            annotations = annotation_columns(raw, ctx.strings)
    if annotations is not None:
        devices = annotations.device
        if not len(devices) or (devices.min() >= 0 and devices.max() <= 1 << 20):
            return annotations
    for i, a in enumerate(raw):  # one by one, to say which one is wrong and why
        if isinstance(a, dict):
            where = f"external_annotations[{i}]"
            checked_int(a.get("device", 0) or 0, f"{where}: device", (0, 1 << 20))
            checked_int(a.get("time_us", -1), f"{where}: time_us", INT64)
    return annotation_columns(raw, ctx.strings)


def _has_non_int(raw: list[Any]) -> bool:
    """Does an annotation's device or time_us need checked_int's eyes (not a plain int)?"""
    dicts = [a for a in raw if isinstance(a, dict)]
    return not (
        set(map(type, [a.get("device", 0) or 0 for a in dicts])) <= {int}
        and set(map(type, [a.get("time_us", -1) for a in dicts])) <= {int}
    )


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
    ctx = BuildContext(warn, budget)
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
        events_per_device[device] = build_events(trace, device, ctx)
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
        pools=ctx.pools,
    )
    seg_devices = {int(d) for d in np.unique(segments.device)}
    for device in sorted(set(events_per_device) | seg_devices):
        ev = events_per_device.get(device) or build_events([], device, ctx)
        snap.traces[device] = _checked_replay(replay_device(snap, device, ev, warn), warn)
    workspace = sum(
        int(np.count_nonzero(t.action == Action.WORKSPACE_SNAPSHOT)) for t in snap.traces.values()
    )
    if workspace:  # only torch_npu writes them
        notes.append(
            f"an Ascend NPU snapshot (torch_npu): its {workspace:,} workspace_snapshot entries "
            "(the NPU workspace allocator's memory) are kept as events and change neither "
            "active nor reserved memory"
        )
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

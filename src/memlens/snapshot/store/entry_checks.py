"""The checks of a cache entry's content before use: every meta field has the type the
loader relies on, and the ids in its columns point inside their tables (so nothing
downstream indexes out of bounds, whatever the files on disk say)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from memlens.errors import CacheError
from memlens.snapshot.model import Snapshot


def _is_list_of(value: Any, kind: type | tuple[type, ...]) -> bool:
    return isinstance(value, list) and all(isinstance(v, kind) for v in value)


def check_meta(meta: dict[str, Any], device_scalars: tuple[str, ...]) -> None:
    """Every meta field has the type the loader and the analyses rely on."""
    ok = (
        isinstance(meta.get("source"), str)
        and _is_list_of(meta.get("strings"), str)
        and _is_list_of(meta.get("streams"), int)
        and _is_list_of(meta.get("pools"), list)
        and all(len(p) == 2 and _is_list_of(p, int) for p in meta["pools"])
        and _is_list_of(meta.get("action_names"), str)
        and _is_list_of(meta.get("warnings"), str)
        and _is_list_of(meta.get("format_notes"), str)
        and isinstance(meta.get("allocator_settings"), dict)
        and isinstance(meta.get("columns"), dict)
        and isinstance(meta.get("devices"), dict)
    )
    if not ok:
        raise CacheError("meta.json has a field of the wrong type")
    for d, scalars in meta["devices"].items():
        if not (
            d.isdigit()
            and isinstance(scalars, dict)
            and set(scalars) == set(device_scalars)
            and all(isinstance(v, int) for v in scalars.values())
        ):
            raise CacheError("meta.json has a malformed device entry")


def _ids_within(ids: np.ndarray, n: int, what: str, allow_missing: bool = True) -> None:
    if len(ids) and (int(ids.max()) >= n or int(ids.min()) < (-1 if allow_missing else 0)):
        raise CacheError(f"{what} refers past its table")


def _offsets_ok(offsets: np.ndarray, n: int, what: str) -> None:
    if len(offsets) == 0 or int(offsets[0]) != 0 or int(offsets[-1]) != n:
        raise CacheError(f"{what} offsets do not cover their table")
    if len(offsets) > 1 and bool(np.any(np.diff(offsets) < 0)):
        raise CacheError(f"{what} offsets go backwards")


def check_references(snap: Snapshot) -> None:
    """Ids point inside their tables and parallel columns have equal lengths, so nothing
    downstream can index out of bounds or read one table with another's length."""
    n_strings, n_frames = len(snap.strings), len(snap.frames.line)
    fr = snap.frames
    if not len(fr.filename) == len(fr.name) == len(fr.kind) == n_frames:
        raise CacheError("frame columns differ in length")
    _ids_within(fr.filename, n_strings, "a frame filename", allow_missing=False)
    _ids_within(fr.name, n_strings, "a frame name", allow_missing=False)
    st = snap.stacks
    _offsets_ok(st.offsets, len(st.frame_ids), "stack")
    _ids_within(st.frame_ids, n_frames, "a stack frame", allow_missing=False)
    n_stacks = len(st.offsets) - 1
    seg = snap.segments
    n_seg = len(seg.device)
    n_blocks = len(seg.block_size)
    for f in dataclasses.fields(seg):
        col = getattr(seg, f.name)
        want = (
            n_seg + 1
            if f.name == "block_offsets"
            else (n_blocks if f.name.startswith("block_") else n_seg)
        )
        if len(col) != want:
            raise CacheError(f"segment column {f.name} has the wrong length")
    _offsets_ok(seg.block_offsets, n_blocks, "block")
    _ids_within(seg.stack, n_stacks, "a segment stack")
    _ids_within(seg.block_stack, n_stacks, "a block stack")
    _ids_within(seg.stream, len(snap.streams), "a segment stream", allow_missing=False)
    ann = snap.annotations
    if not len(ann.name) == len(ann.stage) == len(ann.device) == len(ann.time_us):
        raise CacheError("annotation columns differ in length")
    _ids_within(ann.name, n_strings, "an annotation name", allow_missing=False)
    for t in snap.traces.values():
        n = len(t.action)
        for name in ("addr", "size", "stream", "time_us", "stack", "pool", "compile_context",
                     "user_metadata", "forward_stack", "version", "alloc_row",
                     "active_after", "reserved_after"):  # fmt: skip
            if len(getattr(t, name)) != n:
                raise CacheError(f"device {t.device}: {name} has the wrong length")
        rows = len(t.alloc_addr)
        for name in ("alloc_event", "free_requested_event", "free_event", "alloc_version",
                     "alloc_size", "alloc_stack", "alloc_stream", "alloc_flags"):  # fmt: skip
            if len(getattr(t, name)) != rows:
                raise CacheError(f"device {t.device}: {name} has the wrong length")
        _ids_within(t.stream, len(snap.streams), "an event stream", allow_missing=False)
        _ids_within(t.alloc_stream, len(snap.streams), "an allocation stream")
        _ids_within(t.stack, n_stacks, "an event stack")
        _ids_within(t.pool, len(snap.pools), "an event pool")
        _ids_within(t.alloc_stack, n_stacks, "an allocation stack")
        for name in ("compile_context", "user_metadata", "forward_stack"):
            _ids_within(getattr(t, name), n_strings, f"an event {name}")
        _ids_within(t.alloc_row, rows, "an event's allocation row")
        for name in ("alloc_event", "free_requested_event"):
            _ids_within(getattr(t, name), n, f"an allocation's {name}")
        _ids_within(t.free_event, n + 1, "an allocation's free_event")
        for name in ("size", "alloc_size", "active_after", "reserved_after"):
            col = getattr(t, name)
            if len(col) and int(col.min()) < 0 and name != "size":
                raise CacheError(f"device {t.device}: negative {name}")

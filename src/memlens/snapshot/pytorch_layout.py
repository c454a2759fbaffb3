"""A loaded snapshot back in PyTorch's own layout: the dict `torch.cuda.memory._snapshot()`
returns (segments with their blocks, device_traces, allocator_settings,
external_annotations), made of plain JSON values, for tools that cannot read pickles
(`memlens export --snapshot-json`). `memlens.load` reads the result back to the same
columns.

What the columnar model does not keep is not invented: frames carry filename, line and
name only; a stack-less entry has no `frames` key; optional per-entry fields
(time_us, compile_context, user_metadata, forward_frames, pool_id) are written only where
set.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import numpy as np

from memlens.errors import MemlensError
from memlens.snapshot.actions import BLOCK_STATE_NAMES, Action
from memlens.snapshot.model import DeviceTrace, Snapshot

_STAGES = {0: "START", 1: "END"}


class _Stacks:
    """Frame lists per stack id, built once (a million entries share a few thousand)."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.cache: dict[int, list[dict[str, Any]]] = {}

    def __call__(self, stack_id: int) -> list[dict[str, Any]] | None:
        if stack_id < 0:
            return None
        frames = self.cache.get(stack_id)
        if frames is None:
            frames = self.cache[stack_id] = self.snap.stack_frames(stack_id)
        return frames


def _entries(dev: DeviceTrace, stacks: _Stacks) -> list[dict[str, Any]]:
    snap = dev.snapshot
    streams = snap.streams
    names = {c: snap.action_name(c) for c in np.unique(dev.action).tolist()}
    cols = [
        dev.action.tolist(), dev.addr.tolist(), dev.size.tolist(), dev.stream.tolist(),
        dev.time_us.tolist(), dev.stack.tolist(), dev.compile_context.tolist(),
        dev.user_metadata.tolist(), dev.forward_stack.tolist(), dev.pool.tolist(),
    ]  # fmt: skip
    out: list[dict[str, Any]] = []
    for action, addr, size, stream, t, stack, cc, meta, fwd, pool in zip(*cols):
        e: dict[str, Any] = {"action": names[action]}
        # an oom entry keeps the device's free bytes where addr would be
        e["device_free" if action == Action.OOM else "addr"] = addr
        e["size"] = size
        e["stream"] = streams[stream]
        if t >= 0:
            e["time_us"] = t
        frames = stacks(stack)
        if frames is not None:
            e["frames"] = frames
        if cc >= 0:
            e["compile_context"] = snap.strings[cc]
        if meta >= 0:
            e["user_metadata"] = snap.strings[meta]
        if fwd >= 0:
            e["forward_frames"] = [snap.strings[fwd]]
        if pool >= 0:
            e["pool_id"] = list(snap.pools[pool])
        out.append(e)
    return out


def _segments(snap: Snapshot, stacks: _Stacks) -> list[dict[str, Any]]:
    sg = snap.segments
    out: list[dict[str, Any]] = []
    offsets = sg.block_offsets.tolist()
    for s in range(len(sg)):
        blocks = []
        for b in range(offsets[s], offsets[s + 1]):
            block: dict[str, Any] = {
                "address": int(sg.block_address[b]),
                "size": int(sg.block_size[b]),
                "requested_size": int(sg.block_requested_size[b]),
                "state": BLOCK_STATE_NAMES[int(sg.block_state[b])],
            }
            frames = stacks(int(sg.block_stack[b]))
            if frames is not None:
                block["frames"] = frames
            blocks.append(block)
        seg: dict[str, Any] = {
            "device": int(sg.device[s]),
            "address": int(sg.address[s]),
            "total_size": int(sg.total_size[s]),
            "allocated_size": int(sg.allocated_size[s]),
            "active_size": int(sg.active_size[s]),
            "requested_size": int(sg.requested_size[s]),
            "stream": snap.streams[int(sg.stream[s])],
            "segment_type": "large" if bool(sg.is_large[s]) else "small",
            "segment_pool_id": [int(sg.pool_id0[s]), int(sg.pool_id1[s])],
            "is_expandable": bool(sg.is_expandable[s]),
            "blocks": blocks,
        }
        frames = stacks(int(sg.stack[s]))
        if frames is not None:
            seg["frames"] = frames
        out.append(seg)
    return out


def to_pytorch_layout(snap: Snapshot) -> dict[str, Any]:
    """The snapshot as PyTorch's snapshot dict, with JSON values only (lists, not tuples)."""
    stacks = _Stacks(snap)
    n_devices = max(snap.traces, default=-1) + 1
    traces = [
        _entries(snap.traces[d], stacks) if d in snap.traces else [] for d in range(n_devices)
    ]
    ann = snap.annotations
    annotations = [
        {"name": snap.strings[n], "stage": _STAGES.get(st, "OTHER"), "device": d, "time_us": t}
        for n, st, d, t in zip(
            ann.name.tolist(), ann.stage.tolist(), ann.device.tolist(), ann.time_us.tolist()
        )
    ]
    return {
        "segments": _segments(snap, stacks),
        "device_traces": traces,
        "allocator_settings": _plain(snap.allocator_settings),
        "external_annotations": annotations,
    }


def _plain(value: Any) -> Any:
    """Tuples as lists and numpy scalars as Python numbers, so json writes every value."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def write_json(snap: Snapshot, out: str | Path | IO[str]) -> None:
    """Write `to_pytorch_layout(snap)` as compact JSON. Written in slices of entries with
    json.dumps (the C encoder; json.dump streams through the pure-Python one, ~3x slower)
    so no single string holds the whole file."""
    data = to_pytorch_layout(snap)
    try:
        if isinstance(out, (str, Path)):
            with open(out, "w", encoding="utf-8") as fh:
                _write(data, fh)
        else:
            _write(data, out)
    except ValueError as exc:  # allow_nan=False: a NaN or infinity (allocator_settings)
        raise MemlensError(f"cannot write the snapshot as JSON: {exc}") from None


SLICE = 20_000  # trace entries per json.dumps call


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _write(data: dict[str, Any], fh: IO[str]) -> None:
    fh.write("{")
    for k, (key, value) in enumerate(data.items()):
        fh.write(("," if k else "") + _dumps(key) + ":")
        if key != "device_traces":
            fh.write(_dumps(value))
            continue
        fh.write("[")
        for d, entries in enumerate(value):
            fh.write(("," if d else "") + "[")
            for i in range(0, len(entries), SLICE):
                fh.write(("," if i else "") + _dumps(entries[i : i + SLICE])[1:-1])
            fh.write("]")
        fh.write("]")
    fh.write("}")

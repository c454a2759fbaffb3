"""Tiny helpers to hand-build snapshots in PyTorch's format inside tests."""

from __future__ import annotations

from typing import Any

MiB = 1024 * 1024

FRAME_USER = {"filename": "/home/u/train.py", "line": 10, "name": "train_step"}
FRAME_TORCH = {
    "filename": "/usr/lib/python3.11/site-packages/torch/nn/functional.py",
    "line": 2380,
    "name": "linear",
}
FRAME_FWD = {"filename": "/home/u/model.py", "line": 20, "name": "forward"}
STACK = [FRAME_TORCH, FRAME_USER]

# an event's time_us is origin + t * step: (origin in microseconds, microseconds per tick)
Clock = tuple[int, int]
CLOCK_US: Clock = (1000, 1)  # t microseconds after 1 ms
CLOCK_MS: Clock = (1_000_000, 1000)  # t milliseconds after 1 s


def ev(
    action: str,
    addr: int,
    size: int,
    t: int = 0,
    stream: int = 0,
    frames: list[dict[str, Any]] | None = None,
    *,
    clock: Clock = CLOCK_US,
    **extra: Any,
) -> dict[str, Any]:
    """One trace entry at tick `t` of `clock` (frames default: STACK)."""
    e = {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": stream,
        "time_us": clock[0] + t * clock[1],
        "frames": STACK if frames is None else frames,
    }
    e.update(extra)
    return e


def block(
    addr: int, size: int, requested: int, state: str, frames: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "address": addr,
        "size": size,
        "requested_size": requested,
        "state": state,
        "frames": frames or [],
    }


def segment(
    addr: int, blocks: list[dict[str, Any]], device: int = 0, stream: int = 0, **extra: Any
) -> dict[str, Any]:
    total = sum(b["size"] for b in blocks)
    seg = {
        "device": device, "address": addr, "total_size": total,
        "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
        "active_size": sum(b["size"] for b in blocks if b["state"] != "inactive"),
        "requested_size": sum(b["requested_size"] for b in blocks if b["state"] != "inactive"),
        "stream": stream, "segment_type": "small", "segment_pool_id": (0, 0),
        "is_expandable": False, "frames": [], "blocks": blocks,
    }  # fmt: skip
    seg.update(extra)
    return seg


def hand_snapshot() -> dict[str, Any]:
    """The worked example of docs/concepts.md (every figure there is checked in tests).

    S = 0x10000 segment of 2 MiB; A reused at 0x10000; B, C (orphan), D, G (ghost).
    """
    S, A, B, C, D, G = 0x10000, 0x10000, 0x10400, 0x10800, 0x10C00, 0x11000
    trace = [
        ev("segment_alloc", S, 2 * MiB, 0),  # 0
        ev("alloc", A, 100, 1),  # 1
        ev("alloc", B, 200, 2),  # 2
        ev("free_requested", A, 100, 3),  # 3
        ev("free_completed", A, 100, 4),  # 4
        ev("free_completed", C, 50, 5),  # 5  orphan: allocated before recording
        ev("alloc", A, 300, 6),  # 6  A again: version 1
        ev("free_requested", B, 200, 7),  # 7
        ev("alloc", D, 10, 8),  # 8
        ev("free_completed", B, 200, 9),  # 9  completed late (another stream used B)
    ]
    blocks = [
        block(A, 512, 300, "active_allocated", STACK),
        block(A + 512, 512, 512, "inactive"),
        block(B, 1024, 1024, "inactive"),
        block(C, 1024, 1024, "inactive"),
        block(D, 1024, 10, "active_allocated", STACK),
        block(G, 1024, 1000, "active_allocated", [FRAME_USER]),
        block(G + 1024, 2 * MiB - 5120, 2 * MiB - 5120, "inactive"),
    ]
    return {"segments": [segment(S, blocks)], "device_traces": [trace]}


def wrapped_snapshot(depth: int) -> dict[str, Any]:
    """Two live allocations (1 and 3 MiB) under `depth` wrapper frames that pass everything on
    (main -> w1 -> ... -> w{depth}), then two different leaves: the tree branches only there.
    Both are alive at the end (and at the peak, after event 2)."""

    def frame(name: str, line: int) -> dict[str, Any]:
        return {"filename": f"/home/u/{name}.py", "line": line, "name": name}

    outer = [frame(f"w{i}", i) for i in range(depth, 0, -1)] + [frame("main", 1)]
    trace = [
        ev("segment_alloc", 0x100000, 8 * MiB, 0, frames=[]),
        ev("alloc", 0x100000, MiB, 1, frames=[frame("leaf_a", 10), *outer]),
        ev("alloc", 0x200000, 3 * MiB, 2, frames=[frame("leaf_b", 20), *outer]),
    ]
    blocks = [
        block(0x100000, MiB, MiB, "active_allocated"),
        block(0x200000, 3 * MiB, 3 * MiB, "active_allocated"),
        block(0x500000, 4 * MiB, 0, "inactive"),
    ]
    return {"segments": [segment(0x100000, blocks, segment_type="large")], "device_traces": [trace]}


GRAPH_POOL = (1, 0)  # a CUDA graph's private pool, as PyTorch numbers them


def pool_snapshot(pool_ids: bool = True) -> dict[str, Any]:
    """Pools of segments freed before the end. S0 (0x100000, 2 MiB) is the default pool's
    and lives to the end; S1 (0x400000, 2 MiB) is GRAPH_POOL's, holds A, and is freed at
    event 5; then a default-pool segment S2 is made at S1's address and holds C to the end.
    `pool_ids=False`: the same trace without the entries' pool_id (PyTorch before it)."""
    S0, S1, P, D = 0x100000, 0x400000, GRAPH_POOL, (0, 0)
    trace = [
        ev("segment_alloc", S0, 2 * MiB, 0, pool_id=D),  # 0
        ev("segment_alloc", S1, 2 * MiB, 1, pool_id=P),  # 1  S1, private
        ev("alloc", S1, 1000, 2, pool_id=P),  # 2  A
        ev("free_requested", S1, 1000, 3, pool_id=P),  # 3
        ev("free_completed", S1, 1000, 4, pool_id=P),  # 4
        ev("segment_free", S1, 2 * MiB, 5, pool_id=P),  # 5  S1 gone
        ev("alloc", S0, 100, 6, pool_id=D),  # 6  B
        ev("segment_alloc", S1, 2 * MiB, 7, pool_id=D),  # 7  S2, same address, default
        ev("alloc", S1, 200, 8, pool_id=D),  # 8  C
    ]
    if not pool_ids:
        for e in trace:
            del e["pool_id"]
    segments = [
        segment(S0, [block(S0, 512, 100, "active_allocated", STACK),
                     block(S0 + 512, 2 * MiB - 512, 2 * MiB - 512, "inactive")]),
        segment(S1, [block(S1, 512, 200, "active_allocated", STACK),
                     block(S1 + 512, 2 * MiB - 512, 2 * MiB - 512, "inactive")]),
    ]  # fmt: skip
    return {"segments": segments, "device_traces": [trace]}

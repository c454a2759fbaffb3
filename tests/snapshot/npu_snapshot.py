"""A small snapshot in torch_npu's format, built from its documented structure: the dict
`torch_npu.npu.memory._snapshot()` / `torch_npu/csrc/npu/memory_snapshot.cpp`
(`_memory_snapshot_pickled`) writes, the layout of CUDA's with NPU addresses, no `time_us`
and no `pool_id` on entries, `is_expandable` on segments, and `workspace_snapshot` trace
entries (MindStudio's MemSnapDump names the action: the NPU workspace allocator's memory,
outside the caching allocator). Pickled with protocol 2 as torch's Pickler writes it.

Hand-worked replay (event: action, bytes; active after it):

    0 segment_alloc S 2 MiB          0
    1 alloc A  (S)       1000     1000
    2 workspace_snapshot W 4096   1000   (not the caching allocator's: no change)
    3 alloc B  (S+1024)  2048     3048   <- the peak
    4 free_requested A            3048
    5 free_completed A            2048
    6 workspace_snapshot W 8192   2048
    7 alloc C  (S)        512     2560

reserved: 2 MiB after every event (one segment, never freed).
"""

from __future__ import annotations

from typing import Any

MiB = 1 << 20
S, W = 0x12C0000000, 0x12C1000000
MODEL = {"filename": "/home/u/npu_train.py", "line": 12, "name": "forward"}
OPS = {
    "filename": "/usr/lib/python3.9/site-packages/torch_npu/utils/_ops.py",
    "line": 88,
    "name": "__call__",
}
FRAMES = [OPS, MODEL]  # innermost first

ACTIVE = [0, 1000, 1000, 3048, 3048, 2048, 2048, 2560]


def entry(action: str, addr: int, size: int) -> dict[str, Any]:
    """A trace entry as memory_snapshot.cpp inserts it: action, addr, size, stream, frames."""
    return {"action": action, "addr": addr, "size": size, "stream": 0, "frames": FRAMES}


def npu_snapshot() -> dict[str, Any]:
    trace = [
        entry("segment_alloc", S, 2 * MiB),
        entry("alloc", S, 1000),
        entry("workspace_snapshot", W, 4096),
        entry("alloc", S + 1024, 2048),
        entry("free_requested", S, 1000),
        entry("free_completed", S, 1000),
        entry("workspace_snapshot", W, 8192),
        entry("alloc", S, 512),
    ]
    blocks = [
        {"address": S, "size": 512, "requested_size": 512, "state": "active_allocated",
         "frames": FRAMES},
        {"address": S + 512, "size": 512, "requested_size": 0, "state": "inactive", "frames": []},
        {"address": S + 1024, "size": 2048, "requested_size": 2048, "state": "active_allocated",
         "frames": FRAMES},
        {"address": S + 3072, "size": 2 * MiB - 3072, "requested_size": 0, "state": "inactive",
         "frames": []},
    ]  # fmt: skip
    segment = {
        "device": 0, "address": S, "total_size": 2 * MiB, "allocated_size": 2560,
        "active_size": 2560, "requested_size": 2560, "stream": 0, "segment_type": "large",
        "is_expandable": False, "frames": FRAMES, "blocks": blocks,
    }  # fmt: skip
    return {"segments": [segment], "device_traces": [trace]}

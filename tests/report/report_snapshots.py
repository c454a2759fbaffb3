"""Hand-built snapshots for the report tests (PyTorch's format), with hostile strings.

No tests here: the other test_report_* modules import these builders.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

MiB = 1024 * 1024

EVIL_NAME = "<img src=x onerror=alert(1)>"
EVIL_FILE = "/home/u/</script><script>alert(2)</script>.py"
EVIL_STAGE = "<script>alert(3)</script>{{JS}}"

U_TRAIN = {"filename": "/home/u/train.py", "line": 10, "name": "train_step"}
U_FWD = {"filename": "/home/u/model.py", "line": 20, "name": "forward"}
U_EVIL = {"filename": EVIL_FILE, "line": 5, "name": EVIL_NAME}
T_LINEAR = {
    "filename": "/usr/lib/python3.11/site-packages/torch/nn/functional.py",
    "line": 2380,
    "name": "linear",
}


def _ev(action: str, addr: int, size: int, t: int, frames: list) -> dict:
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": 1000 + t,
        "frames": frames,
    }


def step_snapshot(*, evil: bool = True, scale: int = 1) -> dict:
    """8 MiB segment; A (1 MiB, forward), B (2 MiB, the hostile frame), C (3 MiB, forward).

    active after each event (MiB): 0, 1, 3, 6 (peak, event 3), 6, 5, 5+512B, 5+512B, 2+512B
    live at the peak: A, B, C. One annotated stage (hostile name) covers events 0..3.
    `scale` multiplies every size (used to make a second, bigger snapshot for the diff).
    """
    S, A, B, C, D = 0x100000, 0x100000, 0x200000, 0x400000, 0x700000
    mid = U_EVIL if evil else {"filename": "/home/u/model.py", "line": 40, "name": "backward"}
    sa, sb, sc = MiB * scale, 2 * MiB * scale, 3 * MiB * scale
    trace = [
        _ev("segment_alloc", S, 8 * MiB * scale, 0, []),
        _ev("alloc", A, sa, 1, [T_LINEAR, U_FWD, U_TRAIN]),
        _ev("alloc", B, sb, 2, [T_LINEAR, mid, U_TRAIN]),
        _ev("alloc", C, sc, 3, [U_FWD, U_TRAIN]),
        _ev("free_requested", A, sa, 4, [T_LINEAR, U_FWD, U_TRAIN]),
        _ev("free_completed", A, sa, 5, [T_LINEAR, U_FWD, U_TRAIN]),
        _ev("alloc", D, 512, 6, [U_TRAIN]),
        _ev("free_requested", C, sc, 7, [U_FWD, U_TRAIN]),
        _ev("free_completed", C, sc, 8, [U_FWD, U_TRAIN]),
    ]
    total = 8 * MiB * scale
    blocks = [
        {"address": S, "size": B - S, "requested_size": 0, "state": "inactive", "frames": []},
        {
            "address": B,
            "size": sb,
            "requested_size": sb,
            "state": "active_allocated",
            "frames": [T_LINEAR, mid, U_TRAIN],
        },
        {
            "address": B + sb,
            "size": D - B - sb,
            "requested_size": 0,
            "state": "inactive",
            "frames": [],
        },
        {
            "address": D,
            "size": 512,
            "requested_size": 512,
            "state": "active_allocated",
            "frames": [U_TRAIN],
        },
        {
            "address": D + 512,
            "size": S + total - D - 512,
            "requested_size": 0,
            "state": "inactive",
            "frames": [],
        },
    ]
    blocks = [b for b in blocks if b["size"] > 0]
    seg = {
        "device": 0, "address": S, "total_size": total,
        "allocated_size": sb + 512, "active_size": sb + 512, "requested_size": sb + 512,
        "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
        "frames": [], "blocks": blocks,
    }  # fmt: skip
    annotations = [
        {"name": EVIL_STAGE if evil else "forward", "stage": "START", "device": 0, "time_us": 1000},
        {"name": EVIL_STAGE if evil else "forward", "stage": "END", "device": 0, "time_us": 1003},
    ]
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
        "expandable_segments": False,
        "max_split_size": -1,
    }
    # deepcopy keeps the frame dicts shared inside the snapshot (as PyTorch's pickles do) but
    # detaches them from the module's constants, so a test that edits a frame edits only its own
    return copy.deepcopy(
        {
            "segments": [seg],
            "device_traces": [trace],
            "external_annotations": annotations,
            "allocator_settings": settings,
        }
    )


def write(snapshot: dict, path: Path) -> Path:
    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    return path


U_CACHE = {"filename": "/home/u/cache.py", "line": 7, "name": "remember"}
U_TMP = {"filename": "/home/u/model.py", "line": 30, "name": "scratch"}


def steps_snapshot(steps: int = 3) -> dict:
    """`steps` annotated steps ("ProfilerStep#k"); each makes a 1 MiB temporary (freed in
    the step) and a 1 MiB cache entry that is never freed: a leak of 1 MiB per step.

    Step k (0-based) covers events 4k..4k+3: alloc tmp, alloc cache, free_requested tmp,
    free_completed tmp. Active at each step's start: k MiB; peak (k+2) MiB inside step k.
    """
    S = 0x1000000
    trace, annotations = (
        [
            {
                "action": "segment_alloc",
                "addr": S,
                "size": 16 * MiB,
                "stream": 0,
                "time_us": 999,
                "frames": [],
            }
        ],
        [],
    )
    t = 1000
    blocks = []
    for k in range(steps):
        tmp, cache = S + 8 * MiB, S + k * MiB
        annotations.append(
            {"name": f"ProfilerStep#{k + 1}", "stage": "START", "device": 0, "time_us": t}
        )
        for action, addr, frames in [
            ("alloc", tmp, [U_TMP, U_TRAIN]),
            ("alloc", cache, [U_CACHE, U_TRAIN]),
            ("free_requested", tmp, [U_TMP, U_TRAIN]),
            ("free_completed", tmp, [U_TMP, U_TRAIN]),
        ]:
            t += 1
            trace.append(
                {
                    "action": action,
                    "addr": addr,
                    "size": MiB,
                    "stream": 0,
                    "time_us": t,
                    "frames": frames,
                }
            )
        t += 1
        annotations.append(
            {"name": f"ProfilerStep#{k + 1}", "stage": "END", "device": 0, "time_us": t}
        )
        blocks.append(
            {
                "address": cache,
                "size": MiB,
                "requested_size": MiB,
                "state": "active_allocated",
                "frames": [U_CACHE, U_TRAIN],
            }
        )
    blocks.append(
        {
            "address": S + steps * MiB,
            "size": (16 - steps) * MiB,
            "requested_size": 0,
            "state": "inactive",
            "frames": [],
        }
    )
    seg = {
        "device": 0, "address": S, "total_size": 16 * MiB,
        "allocated_size": steps * MiB, "active_size": steps * MiB, "requested_size": steps * MiB,
        "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
        "frames": [], "blocks": blocks,
    }  # fmt: skip
    return {"segments": [seg], "device_traces": [trace], "external_annotations": annotations}


def with_oom(snapshot: dict, requested: int = 100 * MiB, device_free: int = MiB) -> dict:
    """The snapshot with an `oom` entry appended (addr holds the driver's free bytes)."""
    trace = snapshot["device_traces"][0]
    trace.append({"action": "oom", "addr": device_free, "size": requested, "stream": 0,
                  "time_us": trace[-1]["time_us"] + 1, "frames": [U_FWD, U_TRAIN]})  # fmt: skip
    return snapshot

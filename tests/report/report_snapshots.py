"""Hand-built snapshots for the report tests (PyTorch's format), with hostile strings.

No tests here: the other test_report_* modules import these builders.
"""

from __future__ import annotations

import copy
import pickle
from pathlib import Path
from typing import Any

from snapshot_builders import FRAME_FWD, FRAME_TORCH, FRAME_USER, block, ev, segment
from snapshot_builders import MiB as MiB

EVIL_NAME = "<img src=x onerror=alert(1)>"
EVIL_FILE = "/home/u/</script><script>alert(2)</script>.py"
EVIL_STAGE = "<script>alert(3)</script>{{JS}}"

U_TRAIN = FRAME_USER  # /home/u/train.py:10 train_step
U_FWD = FRAME_FWD  # /home/u/model.py:20 forward
U_EVIL = {"filename": EVIL_FILE, "line": 5, "name": EVIL_NAME}
T_LINEAR = FRAME_TORCH  # torch/nn/functional.py:2380 linear


def step_snapshot(*, evil: bool = True, scale: int = 1) -> dict[str, Any]:
    """8 MiB segment; A (1 MiB, forward), B (2 MiB, the hostile frame), C (3 MiB, forward).

    active after each event (MiB): 0, 1, 3, 6 (peak, event 3), 6, 5, 5+512B, 5+512B, 2+512B
    live at the peak: A, B, C. One annotated stage (hostile name) covers events 0..3.
    `scale` multiplies every size (used to make a second, bigger snapshot for the diff).
    """
    S, A, B, C, D = 0x100000, 0x100000, 0x200000, 0x400000, 0x700000
    mid = U_EVIL if evil else {"filename": "/home/u/model.py", "line": 40, "name": "backward"}
    sa, sb, sc = MiB * scale, 2 * MiB * scale, 3 * MiB * scale
    trace = [
        ev("segment_alloc", S, 8 * MiB * scale, 0, frames=[]),
        ev("alloc", A, sa, 1, frames=[T_LINEAR, U_FWD, U_TRAIN]),
        ev("alloc", B, sb, 2, frames=[T_LINEAR, mid, U_TRAIN]),
        ev("alloc", C, sc, 3, frames=[U_FWD, U_TRAIN]),
        ev("free_requested", A, sa, 4, frames=[T_LINEAR, U_FWD, U_TRAIN]),
        ev("free_completed", A, sa, 5, frames=[T_LINEAR, U_FWD, U_TRAIN]),
        ev("alloc", D, 512, 6, frames=[U_TRAIN]),
        ev("free_requested", C, sc, 7, frames=[U_FWD, U_TRAIN]),
        ev("free_completed", C, sc, 8, frames=[U_FWD, U_TRAIN]),
    ]
    total = 8 * MiB * scale
    blocks = [
        block(S, B - S, 0, "inactive"),
        block(B, sb, sb, "active_allocated", [T_LINEAR, mid, U_TRAIN]),
        block(B + sb, D - B - sb, 0, "inactive"),
        block(D, 512, 512, "active_allocated", [U_TRAIN]),
        block(D + 512, S + total - D - 512, 0, "inactive"),
    ]
    seg = segment(S, [b for b in blocks if b["size"] > 0], segment_type="large")
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


def write(snapshot: dict[str, Any], path: Path) -> Path:
    path.write_bytes(pickle.dumps(snapshot, protocol=4))
    return path


U_CACHE = {"filename": "/home/u/cache.py", "line": 7, "name": "remember"}
U_TMP = {"filename": "/home/u/model.py", "line": 30, "name": "scratch"}


def steps_snapshot(steps: int = 3) -> dict[str, Any]:
    """`steps` annotated steps ("ProfilerStep#k"); each makes a 1 MiB temporary (freed in
    the step) and a 1 MiB cache entry that is never freed: a leak of 1 MiB per step.

    Step k (0-based) covers events 4k..4k+3: alloc tmp, alloc cache, free_requested tmp,
    free_completed tmp. Active at each step's start: k MiB; peak (k+2) MiB inside step k.
    """
    S = 0x1000000
    trace = [ev("segment_alloc", S, 16 * MiB, -1, frames=[])]  # at 999 us
    annotations = []
    t = 0  # ticks of the default clock: 1000 + t microseconds
    blocks = []
    for k in range(steps):
        tmp, cache = S + 8 * MiB, S + k * MiB
        annotations.append(
            {"name": f"ProfilerStep#{k + 1}", "stage": "START", "device": 0, "time_us": 1000 + t}
        )
        for action, addr, frames in [
            ("alloc", tmp, [U_TMP, U_TRAIN]),
            ("alloc", cache, [U_CACHE, U_TRAIN]),
            ("free_requested", tmp, [U_TMP, U_TRAIN]),
            ("free_completed", tmp, [U_TMP, U_TRAIN]),
        ]:
            t += 1
            trace.append(ev(action, addr, MiB, t, frames=frames))
        t += 1
        annotations.append(
            {"name": f"ProfilerStep#{k + 1}", "stage": "END", "device": 0, "time_us": 1000 + t}
        )
        blocks.append(block(cache, MiB, MiB, "active_allocated", [U_CACHE, U_TRAIN]))
    blocks.append(block(S + steps * MiB, (16 - steps) * MiB, 0, "inactive"))
    seg = segment(S, blocks, segment_type="large")
    return {"segments": [seg], "device_traces": [trace], "external_annotations": annotations}


def with_oom(
    snapshot: dict[str, Any], requested: int = 100 * MiB, device_free: int = MiB
) -> dict[str, Any]:
    """The snapshot with an `oom` entry appended (addr holds the driver's free bytes)."""
    trace = snapshot["device_traces"][0]
    trace.append({"action": "oom", "addr": device_free, "size": requested, "stream": 0,
                  "time_us": trace[-1]["time_us"] + 1, "frames": [U_FWD, U_TRAIN]})  # fmt: skip
    return snapshot

"""Hand-built snapshots for the analysis tests, in PyTorch's format. Every expected value in
the tests is worked out by hand from the comments here.

`training_snapshot()`: two annotated steps on one 1 MiB segment S1 (plus a 2 MiB segment
S2 made and freed in step 2). Event index: action, allocation, size, time_us (1000 + t).

    ghost P  0x100000  1000  (active_allocated at the end, never in the trace: a parameter)
     0 alloc A1 0x100400  100  t=10  FWD         activation (freed in backward)
     1 alloc T1 0x100800   50  t=20  FWD         temporary
     2 free_requested T1       t=30
     3 free_completed T1       t=30
     4 alloc G  0x100C00  200  t=40  BW          gradient (alive at the end)
     5 free_requested A1       t=50  BW
     6 free_completed A1       t=50  BW
     7 alloc L1 0x101000   10  t=60  FWD         left alive (leak)
     8 alloc O  0x101400  300  t=70  OPT         optimizer state
     9 alloc A2 0x100400  100  t=110 FWD         activation, version 1 of 0x100400
    10 segment_alloc S2 0x200000 2 MiB t=120
    11 alloc BIG 0x200000 big t=120 FWD          large temporary  <- the peak
    12 free_requested BIG      t=130
    13 free_completed BIG      t=130
    14 alloc I  0x100800   30  t=140 BW          autograd internal
    15 free_requested I        t=150 BW
    16 free_completed I        t=150 BW
    17 free_requested A2       t=160 BW
    18 free_completed A2       t=170 BW          completed one event (10 µs) later
    19 alloc L2 0x101800   10  t=180 FWD         left alive
    20 segment_free S2         t=190
    21 alloc X  0x101C00    5  t=200 TRAIN       other

Annotations (time_us): setup END 1025 (no START: began before the trace),
ProfilerStep#1 1005..1095, ProfilerStep#2 1105..1195, forward 1110..1130 (inside step 2;
its START ties with event 9), eval START 1198 (never ended).
"""

from __future__ import annotations

from typing import Any

from snapshot_builders import MiB as MiB
from snapshot_builders import block, ev, segment

TRAIN = {"filename": "/home/u/train.py", "line": 50, "name": "train"}
MODEL = {"filename": "/home/u/model.py", "line": 20, "name": "forward"}
ADAM = {
    "filename": "/usr/lib/python3.11/site-packages/torch/optim/adam.py",
    "line": 100,
    "name": "_init_group",
}
MM_BW = {"filename": "??", "line": 0, "name": "torch::autograd::generated::MmBackward0::apply(x)"}
ENGINE = {"filename": "??", "line": 0, "name": "torch::autograd::Engine::evaluate_function(x)"}

FWD = [MODEL, TRAIN]
OPT = [ADAM, TRAIN]
BW = [MM_BW, ENGINE]

S1, S2 = 0x100000, 0x200000
P, A, T, G, L1, OPT_STATE, L2, X = (0x100000, 0x100400, 0x100800, 0x100C00, 0x101000, 0x101400,
                            0x101800, 0x101C00)  # fmt: skip
BIG_SIZE = 1_500_000


def ann(name: str, stage: str, t: int, device: int = 0) -> dict[str, Any]:
    return {"name": name, "stage": stage, "device": device, "time_us": 1000 + t}


def training_trace(big: int = BIG_SIZE) -> list[dict[str, Any]]:
    return [
        ev("alloc", A, 100, 10, frames=FWD),  # 0
        ev("alloc", T, 50, 20, frames=FWD),  # 1
        ev("free_requested", T, 50, 30, frames=FWD),  # 2
        ev("free_completed", T, 50, 30, frames=FWD),  # 3
        ev("alloc", G, 200, 40, frames=BW),  # 4
        ev("free_requested", A, 100, 50, frames=BW),  # 5
        ev("free_completed", A, 100, 50, frames=BW),  # 6
        ev("alloc", L1, 10, 60, frames=FWD),  # 7
        ev("alloc", OPT_STATE, 300, 70, frames=OPT),  # 8
        ev("alloc", A, 100, 110, frames=FWD),  # 9
        ev("segment_alloc", S2, 2 * MiB, 120, frames=FWD),  # 10
        ev("alloc", S2, big, 120, frames=FWD),  # 11
        ev("free_requested", S2, big, 130, frames=FWD),  # 12
        ev("free_completed", S2, big, 130, frames=FWD),  # 13
        ev("alloc", T, 30, 140, frames=BW),  # 14
        ev("free_requested", T, 30, 150, frames=BW),  # 15
        ev("free_completed", T, 30, 150, frames=BW),  # 16
        ev("free_requested", A, 100, 160, frames=BW),  # 17
        ev("free_completed", A, 100, 170, frames=BW),  # 18
        ev("alloc", L2, 10, 180, frames=FWD),  # 19
        ev("segment_free", S2, 2 * MiB, 190, frames=[]),  # 20
        ev("alloc", X, 5, 200, frames=[TRAIN]),  # 21
    ]


def training_segments(device: int = 0) -> list[dict[str, Any]]:
    blocks = [
        block(P, 1024, 1000, "active_allocated"),
        block(A, 1024, 1024, "inactive"),
        block(T, 1024, 1024, "inactive"),
        block(G, 1024, 200, "active_allocated", BW),
        block(L1, 1024, 10, "active_allocated", FWD),
        block(OPT_STATE, 1024, 300, "active_allocated", OPT),
        block(L2, 1024, 10, "active_allocated", FWD),
        block(X, 1024, 5, "active_allocated", [TRAIN]),
        block(0x102000, MiB - 8 * 1024, MiB - 8 * 1024, "inactive"),
    ]
    return [segment(S1, blocks, device=device, segment_type="large")]


def training_annotations() -> list[dict[str, Any]]:
    return [
        ann("ProfilerStep#1", "START", 5),
        ann("setup", "END", 25),
        ann("ProfilerStep#1", "END", 95),
        ann("ProfilerStep#2", "START", 105),
        ann("forward", "START", 110),
        ann("forward", "END", 130),
        ann("ProfilerStep#2", "END", 195),
        ann("eval", "START", 198),
    ]


def training_snapshot(big: int = BIG_SIZE) -> dict[str, Any]:
    return {
        "segments": training_segments(),
        "device_traces": [training_trace(big)],
        "external_annotations": training_annotations(),
    }


def expandable_snapshot() -> dict[str, Any]:
    """One expandable segment at 0x400000; final mapping 4 MiB.

    0 segment_map 0x400000 2 MiB; 1 alloc A 0x400000 1 MiB; 2 segment_map 0x600000 4 MiB;
    3 alloc B 0x600000 3 MiB; 4/5 free B; 6 segment_unmap 0x800000 2 MiB.
    """
    base = 0x400000
    trace = [
        ev("segment_map", base, 2 * MiB, 0, frames=FWD),
        ev("alloc", base, MiB, 1, frames=FWD),
        ev("segment_map", base + 2 * MiB, 4 * MiB, 2, frames=FWD),
        ev("alloc", base + 2 * MiB, 3 * MiB, 3, frames=FWD),
        ev("free_requested", base + 2 * MiB, 3 * MiB, 4, frames=FWD),
        ev("free_completed", base + 2 * MiB, 3 * MiB, 5, frames=FWD),
        ev("segment_unmap", base + 4 * MiB, 2 * MiB, 6, frames=[]),
    ]
    blocks = [
        block(base, MiB, MiB, "active_allocated", FWD),
        block(base + MiB, 3 * MiB, 3 * MiB, "inactive"),
    ]
    seg = segment(base, blocks, is_expandable=True, segment_type="large")
    return {"segments": [seg], "device_traces": [trace]}


def oom_snapshot() -> dict[str, Any]:
    """A 1 MiB block live in a 2 MiB segment, then a 4 MiB request fails.

    0 segment_alloc 0x100000 2 MiB; 1 alloc 0x100000 1 MiB (FWD); 2 oom 4 MiB,
    device_free 3 MiB; 3 alloc 0x2FFC00 100 (FWD)."""
    trace = [
        ev("segment_alloc", S1, 2 * MiB, 0, frames=FWD),
        ev("alloc", S1, MiB, 1, frames=FWD),
        {
            "action": "oom",
            "device_free": 3 * MiB,
            "size": 4 * MiB,
            "stream": 0,
            "time_us": 1002,
            "frames": OPT,
        },  # fmt: skip
        ev("alloc", 0x2FFC00, 100, 3, frames=FWD),
    ]
    blocks = [
        block(S1, MiB, MiB, "active_allocated", FWD),
        block(S1 + MiB, MiB - 1024, MiB - 1024, "inactive"),
        block(0x2FFC00, 1024, 100, "active_allocated", FWD),
    ]
    return {"segments": [segment(S1, blocks, segment_type="large")], "device_traces": [trace]}

"""Hand-built snapshots (PyTorch's format) whose every figure the TUI tests check."""

from __future__ import annotations

from functools import partial
from typing import Any

from snapshot_builders import CLOCK_MS, FRAME_FWD, FRAME_TORCH, ev
from snapshot_builders import MiB as MiB

MAIN = {"filename": "/home/u/train.py", "line": 5, "name": "main"}
FWD = FRAME_FWD  # /home/u/model.py:20 forward
OPT = {"filename": "/home/u/optim.py", "line": 7, "name": "step"}
TORCH = FRAME_TORCH  # torch/nn/functional.py:2380 linear
CPP = {"filename": "", "line": 0, "name": "at::native::empty_cuda(long)"}
STACK_FWD = [CPP, TORCH, FWD, MAIN]  # innermost first, as PyTorch writes them
STACK_OPT = [OPT, MAIN]


# these traces tick in milliseconds from 1 s (the TUI shows wall time)
ev_ms = partial(ev, clock=CLOCK_MS)


def small(scale: int = 1, extra_fwd: int = 0, fwd_line: int = 20) -> dict[str, Any]:
    """Nine events: a 20 MiB segment, A 4, B 2, C 8 (the peak, 14 MiB), C freed, D 1, B freed.

    `scale` multiplies C (the peak), `extra_fwd` adds a forward allocation and `fwd_line`
    moves `forward` (edited code), to build the second snapshot of a comparison.
    """
    fwd = [CPP, TORCH, {**FWD, "line": fwd_line}, MAIN]
    S, A, B, C, D, E = 0x1000000, 0x1000000, 0x1400000, 0x1600000, 0x1E00000, 0x1F00000
    c = 8 * MiB * scale
    trace = [
        ev_ms("segment_alloc", S, 20 * MiB, 0, frames=[]),  # 0
        ev_ms("alloc", A, 4 * MiB, 1, frames=fwd),  # 1
        ev_ms("alloc", B, 2 * MiB, 2, frames=STACK_OPT),  # 2
        ev_ms("alloc", C, c, 3, frames=fwd),  # 3  peak
        ev_ms("free_requested", C, c, 4, frames=fwd),  # 4
        ev_ms("free_completed", C, c, 5, frames=fwd),  # 5
        ev_ms("alloc", D, 1 * MiB, 6, frames=fwd),  # 6
        ev_ms("free_requested", B, 2 * MiB, 7, frames=STACK_OPT),  # 7
        ev_ms("free_completed", B, 2 * MiB, 8, frames=STACK_OPT),  # 8
    ]
    if extra_fwd:
        trace.insert(4, ev_ms("alloc", E, extra_fwd, 3, frames=fwd))
    annotations = [
        {"name": "forward", "stage": "START", "device": 0, "time_us": 1_000_000},
        {"name": "forward", "stage": "END", "device": 0, "time_us": 1_005_500},
        {"name": "optimizer", "stage": "START", "device": 0, "time_us": 1_006_000},
        {"name": "optimizer", "stage": "END", "device": 0, "time_us": 1_009_000},
    ]
    return {"segments": [], "device_traces": [trace], "external_annotations": annotations}


def long_trace(n_allocs: int = 500) -> dict[str, Any]:
    """A saw-tooth: n allocations of i KiB, each freed right after: 2n events, peak at the end."""
    trace = []
    for i in range(1, n_allocs + 1):
        trace.append(ev_ms("alloc", 0x100000 * i, i * 1024, 2 * i, frames=STACK_FWD))
        if i < n_allocs:
            trace.append(
                ev_ms("free_completed", 0x100000 * i, i * 1024, 2 * i + 1, frames=STACK_FWD)
            )
    return {"segments": [], "device_traces": [trace]}

"""Hand-built snapshots (PyTorch's format) whose every figure the TUI tests check."""

from __future__ import annotations

MiB = 1024 * 1024

MAIN = {"filename": "/home/u/train.py", "line": 5, "name": "main"}
FWD = {"filename": "/home/u/model.py", "line": 20, "name": "forward"}
OPT = {"filename": "/home/u/optim.py", "line": 7, "name": "step"}
TORCH = {
    "filename": "/usr/lib/python3.11/site-packages/torch/nn/functional.py",
    "line": 2380,
    "name": "linear",
}
CPP = {"filename": "", "line": 0, "name": "at::native::empty_cuda(long)"}
STACK_FWD = [CPP, TORCH, FWD, MAIN]  # innermost first, as PyTorch writes them
STACK_OPT = [OPT, MAIN]


def _ev(action: str, addr: int, size: int, t: int, frames: list) -> dict:
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": 1_000_000 + t * 1000,
        "frames": frames,
    }


def small(scale: int = 1, extra_fwd: int = 0, fwd_line: int = 20) -> dict:
    """Nine events: a 20 MiB segment, A 4, B 2, C 8 (the peak, 14 MiB), C freed, D 1, B freed.

    `scale` multiplies C (the peak), `extra_fwd` adds a forward allocation and `fwd_line`
    moves `forward` (edited code), to build the second snapshot of a comparison.
    """
    fwd = [CPP, TORCH, {**FWD, "line": fwd_line}, MAIN]
    S, A, B, C, D, E = 0x1000000, 0x1000000, 0x1400000, 0x1600000, 0x1E00000, 0x1F00000
    c = 8 * MiB * scale
    trace = [
        _ev("segment_alloc", S, 20 * MiB, 0, []),  # 0
        _ev("alloc", A, 4 * MiB, 1, fwd),  # 1
        _ev("alloc", B, 2 * MiB, 2, STACK_OPT),  # 2
        _ev("alloc", C, c, 3, fwd),  # 3  peak
        _ev("free_requested", C, c, 4, fwd),  # 4
        _ev("free_completed", C, c, 5, fwd),  # 5
        _ev("alloc", D, 1 * MiB, 6, fwd),  # 6
        _ev("free_requested", B, 2 * MiB, 7, STACK_OPT),  # 7
        _ev("free_completed", B, 2 * MiB, 8, STACK_OPT),  # 8
    ]
    if extra_fwd:
        trace.insert(4, _ev("alloc", E, extra_fwd, 3, fwd))
    annotations = [
        {"name": "forward", "stage": "START", "device": 0, "time_us": 1_000_000},
        {"name": "forward", "stage": "END", "device": 0, "time_us": 1_005_500},
        {"name": "optimizer", "stage": "START", "device": 0, "time_us": 1_006_000},
        {"name": "optimizer", "stage": "END", "device": 0, "time_us": 1_009_000},
    ]
    return {"segments": [], "device_traces": [trace], "external_annotations": annotations}


def long_trace(n_allocs: int = 500) -> dict:
    """A saw-tooth: n allocations of i KiB, each freed right after: 2n events, peak at the end."""
    trace = []
    for i in range(1, n_allocs + 1):
        trace.append(_ev("alloc", 0x100000 * i, i * 1024, 2 * i, STACK_FWD))
        if i < n_allocs:
            trace.append(_ev("free_completed", 0x100000 * i, i * 1024, 2 * i + 1, STACK_FWD))
    return {"segments": [], "device_traces": [trace]}

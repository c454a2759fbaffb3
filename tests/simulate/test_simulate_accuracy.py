"""Simulated cs336 runs against the snapshots recorded on a real GPU (../shared/snapshots).

Targets (issue 6): peak active within 2 %, reserved within 5 %. The measured errors are
far smaller (see docs/simulation.md); the baseline is exact wherever the recording
process had no history before the trace started.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from cs336_model import run  # noqa: E402  (beside this file: on sys.path under pytest)

import memlens  # noqa: E402

# file -> (context, fullstep, mixed, baseline reproducible)
CASES = {
    "cs336_memory_ctx128_forward.pickle": (128, False, False, True),
    "cs336_memory_ctx128_fullstep.pickle": (128, True, False, True),
    "cs336_memory_ctx128_forward_mixed.pickle": (128, False, True, True),
    "cs336_memory_ctx512_forward.pickle": (512, False, False, False),
    "cs336_memory_ctx256_fullstep.pickle": (256, True, False, False),
}


def simulate_case(context: int, fullstep: bool, mixed: bool) -> dict[str, Any]:
    with memlens.simulate() as sim:
        keep = run(context, fullstep, mixed)  # alive at dump time, as in the recording
    del keep
    gc.collect()
    assert sim.snapshot is not None
    return sim.snapshot


def rel(a: int, b: int) -> float:
    return abs(a - b) / b


@pytest.mark.parametrize("name", list(CASES))
def test_simulation_matches_the_gpu_recording(name, expected_figures):
    context, fullstep, mixed, exact_baseline = CASES[name]
    snap = simulate_case(context, fullstep, mixed)
    sim = memlens.load(snap).device(0)
    real = expected_figures[name]
    assert rel(sim.peak_active_bytes, real["peak_active_bytes"]) < 0.02
    if not fullstep:  # forward passes, bf16 autocast included: exact to the byte
        assert sim.peak_active_bytes == real["peak_active_bytes"]
    assert rel(sim.peak_reserved_bytes, real["peak_reserved_bytes"]) < 0.05
    assert rel(sim.end_reserved_bytes, real["end_reserved_bytes"]) < 0.05
    if exact_baseline:
        assert sim.baseline_bytes == real["baseline_bytes"]
    else:
        # the recording process ran other configurations first; their cuBLAS workspaces
        # (32 MiB each) were freed by empty_cache inside the trace
        assert real["baseline_bytes"] - sim.baseline_bytes in (32 * 2**20, 64 * 2**20)
    live = {}
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    active = {
        b["address"]: b["requested_size"]
        for s in snap["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    }
    # parameters were allocated before recording began: live at the end, absent from trace
    assert set(live) <= set(active)
    assert all(active[a] == size for a, size in live.items())

"""The synthetic generator (memlens generate, memlens.generate_snapshot) drives the same
allocator model as `memlens simulate`, so its snapshots obey the model's rules."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

import memlens
from memlens.analysis.allocator_model import K_LARGE_BUFFER, K_SMALL_BUFFER
from memlens.simulation.synthetic import generate_trace_dict


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"expandable": True},
        {"devices": 2, "truncate": 300},
        {"oom": True, "side_stream": False},
    ],
    ids=["default", "expandable", "two-devices-truncated", "oom"],
)
def test_generated_snapshots_replay_cleanly(options):
    raw = generate_trace_dict(events=2000, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no SnapshotWarning: the trace and segments agree
        snap = memlens.load(raw, cache=False)
    for device, trace in enumerate(raw["device_traces"]):
        dev = snap.device(device)
        segs = [s for s in raw["segments"] if s["device"] == device]
        assert dev.n_events == len(trace) >= 2000
        assert dev.end_reserved_bytes == sum(s["total_size"] for s in segs)
        live = sum(b["requested_size"] for s in segs for b in s["blocks"])
        assert dev.end_active_bytes == live


def test_expandable_segments_grow_one_range_per_pool_and_stream():
    raw = generate_trace_dict(events=2000, expandable=True)
    segs = raw["segments"]
    assert segs and all(s["is_expandable"] for s in segs)
    keys = [(s["segment_type"], s["stream"]) for s in segs]
    assert len(keys) == len(set(keys))  # one range each
    actions = {e["action"] for e in raw["device_traces"][0]}
    assert "segment_map" in actions and "segment_alloc" not in actions
    for s in segs:  # mapped in whole pages: 2 MiB small pool, 20 MiB large pool
        page = K_SMALL_BUFFER if s["segment_type"] == "small" else K_LARGE_BUFFER
        assert s["total_size"] % page == 0


def test_same_seed_same_snapshot():
    assert generate_trace_dict(events=500, seed=3) == generate_trace_dict(events=500, seed=3)


def test_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from memlens.simulation.synthetic import generate_trace_dict\n"
        "assert generate_trace_dict(events=100)['device_traces'][0]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)

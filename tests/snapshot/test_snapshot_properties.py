"""Property tests: on random traces the vectorized replay equals the naive MemoryViz port,
and generated snapshots keep the end-of-trace invariant whatever the options."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import memlens
from memlens.simulation.synthetic import generate_trace_dict
from snapshot_builders import ev
from snapshot_reference import memoryviz_replay

ADDRS = [0x1000 * k for k in range(1, 7)]


@st.composite
def random_traces(draw):
    """Alloc/free sequences over few addresses, with orphans, late completions, skips."""
    n = draw(st.integers(0, 60))
    trace = []
    for _ in range(n):
        kind = draw(
            st.sampled_from(
                [
                    "alloc",
                    "alloc",
                    "free_requested",
                    "free_completed",
                    "free_completed",
                    "segment_alloc",
                    "snapshot",
                ]
            )
        )
        addr = draw(st.sampled_from(ADDRS))
        size = draw(st.integers(1, 5000))
        trace.append(ev(kind, addr, size))
    return trace


def _naive_live(trace: list[dict[str, Any]], end_event: int) -> list[tuple[int, int]]:
    """Which allocation is alive after `end_event`, MemoryViz's way, as (addr, size) pairs."""
    live: list[list[Any]] = []  # [addr, size, alloc event, free event or None]
    opened = {}
    orphan = []
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            opened_idx = len(live)
            live.append([e["addr"], e["size"], i, None])
            opened[e["addr"]] = opened_idx
        elif e["action"] == "free_completed":
            if e["addr"] in opened:
                live[opened.pop(e["addr"])][3] = i
            else:
                orphan.append([e["addr"], e["size"], -1, i])
    rows = orphan + live
    return sorted(
        (a, s)
        for a, s, start, stop in rows
        if start <= end_event and (stop is None or stop > end_event)
    )


@settings(max_examples=200, deadline=None)
@given(random_traces())
def test_vectorized_replay_equals_naive(trace):
    raw = {"segments": [], "device_traces": [trace]}
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        d = memlens.load(raw).device(0)
    ref = memoryviz_replay(raw, 0)
    assert d.baseline_bytes == ref["baseline"]
    assert d.active_after.tolist() == ref["active_after"]
    if any(e["action"] == "free_completed" for e in trace):
        for i in range(-1, len(trace)):
            rows = d.live_at(i)
            got = sorted(zip(d.alloc_addr[rows].tolist(), d.alloc_size[rows].tolist()))
            assert got == _naive_live(trace, i)
            assert int(d.alloc_size[rows].sum()) == d.active_at(i)


@settings(max_examples=12, deadline=None)
@given(
    events=st.integers(0, 3000),
    devices=st.integers(1, 2),
    truncate=st.integers(0, 500),
    expandable=st.booleans(),
    oom=st.booleans(),
    seed=st.integers(0, 10),
)
def test_generated_snapshots_keep_the_invariant(events, devices, truncate, expandable, oom, seed):
    raw = generate_trace_dict(
        events=events,
        devices=devices,
        layers=3,
        truncate=truncate,
        expandable=expandable,
        oom=oom,
        seed=seed,
    )
    snap = memlens.load(raw)
    assert snap.devices == list(range(devices))
    for dev_id in snap.devices:
        d = snap.device(dev_id)
        ref = memoryviz_replay(raw, dev_id)
        assert d.active_after.tolist() == ref["active_after"]
        seg = snap.segments
        rows = seg.of_device(dev_id)
        blk = np.concatenate(
            [np.arange(seg.block_offsets[r], seg.block_offsets[r + 1]) for r in rows]
        )
        active = blk[seg.block_state[blk] == 1]
        live = d.live_at(d.n_events - 1)
        assert sorted(zip(d.alloc_addr[live].tolist(), d.alloc_size[live].tolist())) == sorted(
            zip(seg.block_address[active].tolist(), seg.block_requested_size[active].tolist())
        )
        assert d.reserved_after.min(initial=d.reserved_start_bytes) >= 0
        if truncate:
            assert snap.allocator_settings["trace_alloc_overflowed"] is True

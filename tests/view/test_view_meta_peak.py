"""The meta answer's peak figures come from the layout's range-max pyramids (views/web/
meta_peak.py), not an argmax over every event on the first paint's path: the same figures
as DeviceTrace's peaks, on hand-built traces (a peak inside the trace, the baseline as the
peak, ties, no events), a generated one and a real recording."""

from __future__ import annotations

from typing import Any

import pytest

import memlens
from memlens.simulation.synthetic import generate_snapshot
from memlens.snapshot.model import Snapshot
from memlens.views.layout import DeviceLayout
from memlens.views.web.meta_peak import chart_peak
from shared_data import SHARED_SNAPSHOTS
from snapshot_builders import MiB, block, ev, hand_snapshot, segment


def as_trace_says(snap: Snapshot) -> list[dict[str, Any]]:
    out = []
    for dev in snap.traces.values():
        pk = dev.peak_event_index
        out.append(
            {
                "peak_event_index": pk,
                "peak_time_us": int(dev.time_us[pk]) if pk >= 0 else None,
                "peak_active_bytes": dev.peak_active_bytes,
                "peak_reserved_bytes": dev.peak_reserved_bytes,
            }
        )
    return out


def from_pyramids(snap: Snapshot) -> list[dict[str, Any]]:
    return [dict(chart_peak(DeviceLayout(dev), True)) for dev in snap.traces.values()]


def going_down() -> dict[str, Any]:
    """Starts mid-run: G (1000 B) alive before the trace is freed, nothing rises above the
    baseline, so the peak is before the first event (-1)."""
    S, G = 0x10000, 0x10400
    trace = [ev("free_requested", G, 1000, 0), ev("free_completed", G, 1000, 1)]
    return {"segments": [segment(S, [block(S, 2 * MiB, 2 * MiB, "inactive")])],
            "device_traces": [trace]}  # fmt: skip


def ties() -> dict[str, Any]:
    """300 B after events 0 and 1 (an empty allocation keeps the height), 0 after 2, 300
    again after 3 and 4: the first of the equal highs is the peak (event 0)."""
    S = 0x10000
    trace = [ev("alloc", S, 300, 0), ev("free_completed", S, 300, 1), ev("alloc", S, 300, 2)]
    trace.insert(1, ev("alloc", S + 512, 0, 0))  # an empty allocation: the same height
    trace.append(ev("alloc", S + 1024, 0, 3))
    return {"segments": [segment(S, [block(S, 2 * MiB, 2 * MiB, "inactive")])],
            "device_traces": [trace]}  # fmt: skip


@pytest.mark.parametrize("raw", [hand_snapshot, going_down, ties])
def test_the_same_figures_as_the_trace_on_hand_built_traces(raw):
    snap = memlens.load(raw(), cache=False)
    assert from_pyramids(snap) == as_trace_says(snap)


def test_the_worked_values():
    assert from_pyramids(memlens.load(going_down(), cache=False))[0]["peak_event_index"] == -1
    (tie,) = from_pyramids(memlens.load(ties(), cache=False))
    assert (tie["peak_event_index"], tie["peak_active_bytes"]) == (0, 300)


def test_the_same_figures_on_a_generated_trace(tmp_path):
    path = tmp_path / "gen.pickle"
    generate_snapshot(path, events=20_000, devices=2)
    snap = memlens.load(path, cache=False)
    assert from_pyramids(snap) == as_trace_says(snap)


def test_the_same_figures_on_a_real_recording():
    path = SHARED_SNAPSHOTS / "wedson_medium_128_training.pickle"
    if not path.is_file():
        pytest.skip("shared snapshots not present")
    snap = memlens.load(path, cache=False)
    assert from_pyramids(snap) == as_trace_says(snap)

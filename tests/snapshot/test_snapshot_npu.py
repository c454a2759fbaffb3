"""Ascend NPU snapshots (torch_npu) read and analysed like CUDA ones, by both readers: the
figures of tests/snapshot/npu_snapshot.py's hand-worked replay, `workspace_snapshot`
entries known (no warning), kept as events and left out of active and reserved memory."""

from __future__ import annotations

import pickle

import pytest
from npu_snapshot import ACTIVE, MiB, npu_snapshot

import memlens
from memlens.analysis.summary import summarize
from memlens.snapshot.actions import Action


@pytest.fixture(params=["python", "compiled"])
def npu_file(request, monkeypatch, tmp_path):
    monkeypatch.setenv("MEMLENS_READER", request.param)
    p = tmp_path / "snapshot_2026-11-28-14-10_0.pickle"
    p.write_bytes(pickle.dumps(npu_snapshot(), protocol=2))
    return p


def test_npu_snapshot_replays_as_worked_by_hand(npu_file):
    snap = memlens.load(npu_file, cache=False)
    dev = snap.device(0)
    assert dev.active_after.tolist() == ACTIVE
    assert dev.reserved_after.tolist() == [2 * MiB] * 8
    assert (dev.peak_active_bytes, dev.peak_event_index) == (3048, 3)
    assert [int(a) for a in dev.action] == [3, 0, 9, 0, 1, 2, 9, 0]
    assert dev.n_allocations == 3 and snap.action_names == []
    assert snap.warnings == []  # workspace_snapshot is a known action
    assert snap.format_notes == [
        "an Ascend NPU snapshot (torch_npu): its 2 workspace_snapshot entries (the NPU "
        "workspace allocator's memory) are kept as events and change neither active nor "
        "reserved memory"
    ]
    assert snap.action_name(Action.WORKSPACE_SNAPSHOT) == "workspace_snapshot"


def test_npu_snapshot_analyses_like_a_cuda_one(npu_file):
    (d,) = summarize(memlens.load(npu_file, cache=False))["devices"]
    assert (d["peak_active_bytes"], d["end_active_bytes"], d["peak_reserved_bytes"]) == (
        3048, 2560, 2 * MiB
    )  # fmt: skip
    assert d["actions"] == {
        "alloc": 3, "free_requested": 1, "free_completed": 1, "segment_alloc": 1,
        "workspace_snapshot": 2,
    }  # fmt: skip
    assert [(s["site"], s["bytes"]) for s in d["top_sites"]] == [
        ("forward (/home/u/npu_train.py:12)", 3048)
    ]
    assert d["pools_at_peak"] == [{"pool": [0, 0], "bytes": 3048, "count": 2}]

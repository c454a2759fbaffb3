"""Every input form and format version the loader promises to understand."""

from __future__ import annotations

import copy
import gzip
import json
import pickle

import pytest

import memlens
from memlens.snapshot.actions import Action
from memlens.snapshot.loader import SnapshotWarning
from snapshot_builders import STACK, MiB, block, ev, hand_snapshot, segment

HAND_CURVE = [1050, 1150, 1350, 1350, 1250, 1200, 1500, 1500, 1510, 1310]


@pytest.mark.parametrize("protocol", [0, 1, 2, 3, 4, 5])
def test_pickle_protocols(tmp_path, protocol):
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(hand_snapshot(), protocol=protocol))
    assert memlens.load(p).device(0).active_after.tolist() == HAND_CURVE


def test_gzip_pickle_and_json_and_gzip_json(tmp_path):
    raw = hand_snapshot()
    (tmp_path / "a.pickle.gz").write_bytes(gzip.compress(pickle.dumps(raw, protocol=4)))
    as_json = copy.deepcopy(raw)
    for s in as_json["segments"]:
        s["segment_pool_id"] = list(s["segment_pool_id"])
    (tmp_path / "b.json").write_text(json.dumps(as_json))
    (tmp_path / "c.json.gz").write_bytes(gzip.compress(json.dumps(as_json).encode()))
    for name in ("a.pickle.gz", "b.json", "c.json.gz"):
        assert memlens.load(tmp_path / name).device(0).active_after.tolist() == HAND_CURVE, name


def test_dict_bytes_and_bare_segment_list():
    raw = hand_snapshot()
    assert memlens.load(raw).device(0).peak_active_bytes == 1510
    assert memlens.load(pickle.dumps(raw)).device(0).peak_active_bytes == 1510
    segs = memlens.load(raw["segments"])
    d = segs.device(0)
    assert d.n_events == 0
    # with no trace, every active block is alive throughout
    assert d.baseline_bytes == 300 + 10 + 1000
    assert d.end_reserved_bytes == 2 * MiB
    assert any("segments only" in n for n in segs.format_notes)


def test_legacy_history_layout():
    """PyTorch 1.13/2.0: blocks have history/real_size, no address or frames."""
    frames = [{"filename": "/home/u/old.py", "line": 3, "name": "f"}]
    seg = {
        "device": 0, "address": 0x2000, "total_size": 2048, "allocated_size": 1024,
        "active_size": 1024, "stream": 0, "segment_type": "small",
        "blocks": [
            {"size": 1024, "state": "active_allocated", "history": [{"addr": 0x2000, "real_size": 700, "frames": frames}]},
            {"size": 1024, "state": "inactive"},
        ],
    }  # fmt: skip
    snap = memlens.load({"segments": [seg], "device_traces": [[]]})
    assert snap.segments.block_address.tolist() == [0x2000, 0x2400]
    assert snap.segments.block_requested_size.tolist() == [700, 1024]
    assert snap.stack_frames(int(snap.segments.block_stack[0])) == frames
    assert snap.device(0).baseline_bytes == 700
    assert any("legacy" in n for n in snap.format_notes)


def test_legacy_cpp_frames_on_entries():
    py = [{"filename": "a.py", "line": 1, "name": "f"}]
    cpp = [{"filename": "x.cpp", "line": 2, "name": "at::g()"}]
    e = ev("alloc", 0x10, 8, frames=py)
    e["cpp_frames"] = cpp
    snap = memlens.load({"segments": [], "device_traces": [[e]]})
    assert [f["name"] for f in snap.stack_frames(int(snap.device(0).stack[0]))] == ["f", "at::g()"]


def test_new_fields_compile_context_metadata_forward_frames_oom():
    trace = [
        ev(
            "alloc",
            0x10,
            8,
            compile_context="Torch-Compiled Region: 0/0",
            user_metadata="step=1",
            forward_frames=["  File a.py, line 1\n", "    x = f()\n"],
        ),  # fmt: skip
        ev("alloc", 0x20, 8, compile_context="N/A", user_metadata=""),
        ev("alloc", 0x30, 8, user_metadata={"phase": "fwd"}),
        {"action": "oom", "device_free": 12345, "size": 4 * MiB, "stream": 0, "time_us": 9},
    ]
    snap = memlens.load({"segments": [], "device_traces": [trace]})
    d = snap.device(0)
    assert snap.string(int(d.compile_context[0])) == "Torch-Compiled Region: 0/0"
    assert d.compile_context[1] == -1
    assert snap.string(int(d.user_metadata[0])) == "step=1"
    assert d.user_metadata[1] == -1
    assert json.loads(snap.string(int(d.user_metadata[2]))) == {"phase": "fwd"}
    assert snap.string(int(d.forward_stack[0])) == "  File a.py, line 1\n    x = f()\n"
    assert d.action[3] == Action.OOM and int(d.addr[3]) == 12345 and int(d.size[3]) == 4 * MiB


def test_unknown_action_and_fields_warn_once_and_keep_going():
    trace = [
        ev("alloc", 0x10, 8, future_field=1),
        ev("annotate", 0x10, 0),
        ev("annotate", 0x10, 0, future_field=2),
        ev("free_completed", 0x10, 8),
    ]
    raw = {"segments": [], "device_traces": [trace], "brand_new_key": {}}
    with pytest.warns(SnapshotWarning) as rec:
        snap = memlens.load(raw)
    msgs = [str(w.message) for w in rec]
    assert sum("'annotate'" in m for m in msgs) == 1
    assert sum("future_field" in m for m in msgs) == 1
    assert sum("brand_new_key" in m for m in msgs) == 1
    d = snap.device(0)
    assert d.active_after.tolist() == [8, 8, 8, 0]
    assert d.action_name(1) == "annotate"


def test_several_devices_streams_and_private_pools():
    s0 = segment(
        0x1000,
        [block(0x1000, 512, 100, "active_allocated", STACK), block(0x1200, 1536, 1536, "inactive")],
    )
    s1 = segment(
        0x9000,
        [block(0x9000, 2048, 2048, "inactive")],
        device=1,
        stream=0xABC,
        segment_pool_id=(1, 7),
    )
    t0 = [ev("alloc", 0x1000, 100)]
    t1 = [
        ev("segment_alloc", 0x9000, 2048, stream=0xABC),
        ev("alloc", 0x9000, 64, stream=0xABC),
        ev("free_completed", 0x9000, 64, stream=0xABC),
    ]
    snap = memlens.load({"segments": [s0, s1], "device_traces": [t0, t1]})
    assert snap.devices == [0, 1]
    assert snap.default_device == 1
    assert snap.device(0).end_active_bytes == 100
    d1 = snap.device(1)
    assert d1.peak_active_bytes == 64 and d1.end_active_bytes == 0
    assert d1.reserved_start_bytes == 0 and d1.end_reserved_bytes == 2048
    assert snap.streams[int(d1.stream[0])] == 0xABC
    assert snap.segments.pool_id0.tolist() == [0, 1] and snap.segments.pool_id1.tolist() == [0, 7]
    with pytest.raises(memlens.MemlensError, match="device 3"):
        snap.device(3)


def test_annotations_columns():
    raw = hand_snapshot()
    raw["external_annotations"] = [
        {"name": "forward", "stage": "START", "device": 0, "time_us": 1001},
        {"name": "forward", "stage": "END", "device": 0, "time_us": 1004},
    ]
    snap = memlens.load(raw)
    a = snap.annotations
    assert [snap.strings[i] for i in a.name] == ["forward", "forward"]
    assert a.stage.tolist() == [0, 1] and a.time_us.tolist() == [1001, 1004]


def test_frames_shared_objects_are_interned_once():
    trace = [ev("alloc", 0x100 * i, 8) for i in range(1, 200)]
    snap = memlens.load({"segments": [], "device_traces": [trace]})
    assert len(snap.stacks) == 1 and len(snap.frames) == 2
    assert set(snap.device(0).stack.tolist()) == {0}

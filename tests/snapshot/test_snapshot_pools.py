"""Trace entries' pool_id: read by both readers into one int16 index per event
(DeviceTrace.pool) into the snapshot's table of pool pairs (Snapshot.pools), -1 where an
entry does not say; a bad pool_id is a SnapshotError naming the entry."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_compiled_equality import assert_same_both_ways

import memlens
from memlens.errors import SnapshotError
from memlens.snapshot.pytorch_layout import to_pytorch_layout
from memlens.snapshot.read import compiled
from memlens.snapshot.store import cache
from shared_data import real_snapshot_names
from snapshot_builders import GRAPH_POOL, pool_snapshot

needs_compiled = pytest.mark.skipif(not compiled.available(), reason="compiled reader not built")


def _file(tmp_path: Path, snap: dict[str, Any], protocol: int = 4) -> Path:
    path = tmp_path / f"pools{protocol}.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=protocol))
    return path


@pytest.mark.parametrize("reader", ["python", "compiled"])
def test_pool_ids_become_an_index_per_event(reader, tmp_path, monkeypatch):
    if reader == "compiled" and not compiled.available():
        pytest.skip("compiled reader not built")
    monkeypatch.setenv("MEMLENS_READER", reader)
    snap = memlens.load(_file(tmp_path, pool_snapshot()), cache=False)
    assert snap.pools == [(0, 0), GRAPH_POOL]  # in order of first use
    dev = snap.device(0)
    assert dev.pool.dtype == np.int16
    assert dev.pool.tolist() == [0, 1, 1, 1, 1, 1, 0, 0, 0]


@pytest.mark.parametrize("reader", ["python", "compiled"])
def test_a_trace_without_pool_id_reads_unknown(reader, tmp_path, monkeypatch):
    if reader == "compiled" and not compiled.available():
        pytest.skip("compiled reader not built")
    monkeypatch.setenv("MEMLENS_READER", reader)
    snap = memlens.load(_file(tmp_path, pool_snapshot(pool_ids=False)), cache=False)
    assert snap.pools == []
    dev = snap.device(0)
    assert dev.pool.tolist() == [-1] * 9
    assert dev.pool.nbytes == 18 and dev.pool.base is not None  # a view of one -1


def test_some_entries_without_pool_id(tmp_path, monkeypatch):
    raw = pool_snapshot()
    trace = raw["device_traces"][0]
    del trace[0]["pool_id"]
    trace[6]["pool_id"] = None
    monkeypatch.setenv("MEMLENS_READER", "python")
    dev = memlens.load(_file(tmp_path, raw), cache=False).device(0)
    assert dev.snapshot.pools == [GRAPH_POOL, (0, 0)]
    assert dev.pool.tolist() == [-1, 0, 0, 0, 0, 0, -1, 1, 1]


@needs_compiled
@pytest.mark.parametrize("protocol", [2, 4, 5])
@pytest.mark.parametrize("pool_ids", [True, False])
def test_both_readers_identical(protocol, pool_ids, tmp_path):
    raw = pool_snapshot(pool_ids)
    if pool_ids:  # a second device, and pool ids past one byte, shared by memo
        shared = (300, 70000)
        raw["device_traces"].append(
            [{"action": "segment_alloc", "addr": 0x900000, "size": 4096, "pool_id": shared},
             {"action": "alloc", "addr": 0x900000, "size": 512, "pool_id": shared},
             {"action": "alloc", "addr": 0x900200, "size": 512, "pool_id": None},
             {"action": "alloc", "addr": 0x900400, "size": 512, "pool_id": (0, 0)}]
        )  # fmt: skip
    assert_same_both_ways(_file(tmp_path, raw, protocol), tmp_path)


@pytest.mark.parametrize("reader", ["python", "compiled"])
@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (5, "pool_id is a int (5), expected a pair of integers"),
        ((1, 2, 3), "pool_id is a tuple (tuple of 3), expected a pair of integers"),
        (("a", 0), "pool_id is a tuple (tuple of 2), expected a pair of integers"),
        ((1 << 70, 0), "pool_id is a tuple (tuple of 2), expected a pair of integers"),
        ([1.5, 0], "pool_id is a list (list of 2), expected a pair of integers"),
    ],
)
def test_a_malformed_pool_id_names_its_entry(reader, bad, said, tmp_path, monkeypatch):
    if reader == "compiled" and not compiled.available():
        pytest.skip("compiled reader not built")
    monkeypatch.setenv("MEMLENS_READER", reader)
    raw = pool_snapshot()
    raw["device_traces"][0][3]["pool_id"] = bad
    with pytest.raises(SnapshotError, match=rf"device 0: trace entry 3: {re_escape(said)}$"):
        memlens.load(_file(tmp_path, raw), cache=False)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_cache_and_json_layout_keep_pools(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLENS_CACHE_DIR", str(tmp_path / "cache"))
    path = _file(tmp_path, pool_snapshot())
    first = memlens.load(path)
    again = memlens.load(path)
    assert again.from_cache and again.pools == first.pools == [(0, 0), GRAPH_POOL]
    assert again.device(0).pool.tolist() == first.device(0).pool.tolist()
    assert cache.CACHE_FORMAT == 5
    # PyTorch's layout as JSON: pairs become lists, and read back as the same pools
    layout = to_pytorch_layout(first)
    assert layout["device_traces"][0][1]["pool_id"] == [1, 0]
    js = tmp_path / "pools.json"
    js.write_text(json.dumps(layout))
    back = memlens.load(js, cache=False)
    assert back.pools == first.pools
    assert back.device(0).pool.tolist() == first.device(0).pool.tolist()


@pytest.mark.parametrize("name", real_snapshot_names() or ["(none)"])
def test_real_snapshots_have_no_pool_ids(name, shared_snapshots_dir):
    """The shared recordings predate pool_id on entries: every event reads unknown."""
    snap = memlens.load(shared_snapshots_dir / name, warn=False)
    assert snap.pools == []
    for dev in snap.traces.values():
        assert int(np.count_nonzero(dev.pool != -1)) == 0 and len(dev.pool) == dev.n_events

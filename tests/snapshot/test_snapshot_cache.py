"""The on-disk column cache: hit, miss on change, rebuild on damage, env and opt-out."""

from __future__ import annotations

import os
import pickle
import time

import numpy as np
import pytest

import memlens
from memlens import Snapshot
from memlens.snapshot.loader import SnapshotWarning
from memlens.snapshot.store import cache as column_cache
from snapshot_builders import hand_snapshot


def _same(a: Snapshot, b: Snapshot) -> None:
    da, db = a.device(0), b.device(0)
    for name in (
        "action",
        "addr",
        "size",
        "stack",
        "alloc_event",
        "free_event",
        "alloc_size",
        "active_after",
        "reserved_after",
    ):
        assert np.array_equal(getattr(da, name), getattr(db, name)), name
    assert da.baseline_bytes == db.baseline_bytes
    assert a.strings == b.strings and a.streams == b.streams


def test_second_open_is_memory_mapped_from_cache(hand_file, tmp_path):
    first = memlens.load(hand_file)
    assert not first.from_cache
    entries = list(column_cache.cache_root().iterdir())
    assert len(entries) == 1 and str(entries[0]).startswith(os.environ["MEMLENS_CACHE_DIR"])
    second = memlens.load(hand_file)
    assert second.from_cache
    assert isinstance(second.device(0).active_after, np.memmap)
    _same(first, second)
    assert second.device(0).peak_active_bytes == 1510


def test_changed_file_misses(hand_file):
    memlens.load(hand_file)
    raw = hand_snapshot()
    raw["device_traces"][0] = raw["device_traces"][0][:5]
    time.sleep(0.01)
    hand_file.write_bytes(pickle.dumps(raw, protocol=4))
    again = memlens.load(hand_file)
    assert not again.from_cache
    assert again.device(0).n_events == 5


def test_corrupt_cache_is_rebuilt_with_a_warning(hand_file):
    memlens.load(hand_file)
    entry, _ = column_cache.entry_dir(hand_file)
    victim = entry / "d0.active_after.npy"
    victim.write_bytes(victim.read_bytes()[:20])
    with pytest.warns(SnapshotWarning, match="rebuilding"):
        again = memlens.load(hand_file)
    assert not again.from_cache
    assert again.device(0).active_after.tolist()[-1] == 1310
    assert memlens.load(hand_file).from_cache


def test_stale_format_is_rebuilt(hand_file):
    memlens.load(hand_file)
    entry, _ = column_cache.entry_dir(hand_file)
    meta = entry / "meta.json"
    text = meta.read_text()
    meta.write_text(text.replace(f'"format": {column_cache.CACHE_FORMAT}', '"format": -1', 1))
    with pytest.warns(SnapshotWarning, match="stale"):
        assert not memlens.load(hand_file).from_cache


def test_no_cache_writes_nothing(hand_file):
    memlens.load(hand_file, cache=False)
    root = column_cache.cache_root()
    assert not root.exists() or not any(root.iterdir())


def test_cli_no_cache_flag(hand_file):
    from click.testing import CliRunner

    from memlens.cli.main import cli

    r = CliRunner().invoke(cli, ["summary", str(hand_file), "--no-cache", "--json"])
    assert r.exit_code == 0, r.output
    root = column_cache.cache_root()
    assert not root.exists() or not any(root.iterdir())


def test_cache_keeps_a_bounded_number_of_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(column_cache, "MAX_ENTRIES", 3)
    paths = []
    for k in range(5):
        p = tmp_path / f"s{k}.pickle"
        p.write_bytes(pickle.dumps(hand_snapshot(), protocol=4))
        memlens.load(p)
        paths.append(p)
        time.sleep(0.01)
    assert len([d for d in column_cache.cache_root().iterdir() if d.is_dir()]) == 3
    assert memlens.load(paths[-1]).from_cache
    assert not memlens.load(paths[0]).from_cache

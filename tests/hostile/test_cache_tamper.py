"""A tampered or stale cache entry never crashes and never answers wrong: it is rebuilt
(issue 16, point 5); the key follows the file's content; a killed writer's temp dir goes."""

from __future__ import annotations

import json
import os
import pickle
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memlens
from memlens.snapshot.store import cache as column_cache
from snapshot_builders import hand_snapshot

COLUMNS = ("action", "addr", "size", "stack", "alloc_event", "free_event", "alloc_size",
           "active_after", "reserved_after")  # fmt: skip


def fingerprint(snap) -> dict[str, Any]:
    d = snap.device(0)
    out = {name: np.asarray(getattr(d, name)).tolist() for name in COLUMNS}
    out["strings"] = list(snap.strings)
    out["segments"] = np.asarray(snap.segments.total_size).tolist()
    out["frames"] = np.asarray(snap.frames.name).tolist()
    return out


def _entry(path: Path) -> Path:
    memlens.load(path)  # writes the entry
    entry, _ = column_cache.entry_dir(path)
    assert (entry / "meta.json").exists()
    return entry


def _flip_byte(p: Path, offset: int = -1) -> None:
    data = bytearray(p.read_bytes())
    data[offset] ^= 0x01
    p.write_bytes(bytes(data))


def _flip_each_column(entry: Path) -> None:
    for p in entry.glob("*.npy"):
        _flip_byte(p)


def _edit_meta(entry: Path, fn: Callable[[dict[str, Any]], object]) -> None:
    meta = json.loads((entry / "meta.json").read_text())
    fn(meta)
    (entry / "meta.json").write_text(json.dumps(meta))


def _set(key: str, value: object) -> Callable[[dict[str, Any]], None]:
    return lambda m: m.__setitem__(key, value)


TAMPERINGS: dict[str, Callable[[Path], object]] = {
    "flip last byte of each column": lambda e: _flip_each_column(e),
    "flip a stack id": lambda e: _flip_byte(e / "d0.stack.npy"),
    "truncate a column": lambda e: (e / "d0.size.npy").write_bytes(
        (e / "d0.size.npy").read_bytes()[:20]
    ),
    "delete a column": lambda e: (e / "segments.total_size.npy").unlink(),
    "column of another dtype": lambda e: np.save(e / "d0.addr.npy", np.zeros(3, dtype=np.float32)),
    "column replaced and manifest updated": lambda e: _replace_with_manifest(e),
    "meta not json": lambda e: (e / "meta.json").write_text("{nope"),
    "meta a list": lambda e: (e / "meta.json").write_text("[]"),
    "strings shortened": lambda e: _edit_meta(e, lambda m: m.__setitem__("strings", ["x"])),
    "strings not strings": lambda e: _edit_meta(e, lambda m: m.__setitem__("strings", [1, 2])),
    "streams emptied": lambda e: _edit_meta(e, _set("streams", [])),
    "device scalars wrong type": lambda e: _edit_meta(
        e, lambda m: m["devices"]["0"].__setitem__("baseline_bytes", "lots")
    ),
    "device key not a number": lambda e: _edit_meta(
        e, lambda m: m.__setitem__("devices", {"x": m["devices"]["0"]})
    ),
    "settings a list": lambda e: _edit_meta(e, _set("allocator_settings", [])),
    "identity edited": lambda e: _edit_meta(e, lambda m: m["identity"].__setitem__("size", 1)),
    "format edited": lambda e: _edit_meta(e, _set("format", 999)),
    "manifest dropped": lambda e: _edit_meta(e, lambda m: m.pop("columns")),
    "npy header garbage": lambda e: (e / "frames.line.npy").write_bytes(b"\x93NUMPY garbage"),
    "a pickle where a column was": lambda e: (e / "d0.time_us.npy").write_bytes(
        pickle.dumps(np.arange(3))
    ),
    "meta.json a directory": lambda e: _meta_dir(e),
}


def _replace_with_manifest(entry: Path) -> None:
    """Consistent forgery of an id column pointing past the stack table: the manifest's crc
    is updated too, so only the cross-reference checks can catch it."""
    path = entry / "d0.stack.npy"
    arr = np.load(path)
    arr[:] = 10_000
    np.save(path, arr)

    def fix(m):
        m["columns"]["d0.stack"].update(column_cache._checksum_of(path))

    _edit_meta(entry, fix)


def _meta_dir(entry: Path) -> None:
    (entry / "meta.json").unlink()
    (entry / "meta.json").mkdir()


@pytest.mark.parametrize("how", list(TAMPERINGS))
def test_tampered_entry_is_rebuilt_with_the_right_figures(hand_file, how):
    truth = fingerprint(memlens.load(hand_file, cache=False))
    entry = _entry(hand_file)
    TAMPERINGS[how](entry)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        try:
            snap = memlens.load(hand_file)
        except memlens.SnapshotError:  # pragma: no cover - would be acceptable, not a crash
            pytest.fail("a damaged cache should be rebuilt, not refused")
    assert fingerprint(snap) == truth
    again = memlens.load(hand_file)  # the rebuilt entry is good
    assert again.from_cache and fingerprint(again) == truth


def test_rewritten_in_place_with_same_size_and_mtime_misses(tmp_path):
    p = tmp_path / "s.pickle"
    a = hand_snapshot()
    p.write_bytes(pickle.dumps(a, protocol=4))
    first = memlens.load(p)
    st = os.stat(p)
    b = hand_snapshot()
    b["device_traces"][0][0]["size"] += 1  # same pickle length, different figure
    data = pickle.dumps(b, protocol=4)
    assert len(data) == st.st_size
    time.sleep(0.01)
    with open(p, "r+b") as fh:  # in place: same inode
        fh.write(data)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(p).st_mtime_ns == st.st_mtime_ns and os.stat(p).st_ino == st.st_ino
    second = memlens.load(p)
    assert not second.from_cache
    assert int(second.device(0).size[0]) == int(first.device(0).size[0]) + 1


def test_killed_writer_temp_dirs_are_pruned(hand_file):
    root = column_cache.cache_root()
    root.mkdir(parents=True, exist_ok=True)
    stale = root / ".deadbeef.abc123"
    stale.mkdir()
    (stale / "d0.size.npy").write_bytes(b"half")
    old = time.time() - 2 * column_cache.STALE_TMP_SECONDS
    os.utime(stale, (old, old))
    fresh = root / ".cafe.def456"  # may belong to a writer running right now: kept
    fresh.mkdir()
    memlens.load(hand_file)
    assert not stale.exists()
    assert fresh.exists()

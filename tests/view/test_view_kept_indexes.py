"""The layout indexes kept beside the column cache (views/layout/persist.py): a second start
answers every viewport byte for byte as a fresh build does, and a damaged or stale kept set
is rebuilt, never trusted."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import memlens
from memlens.simulation.synthetic import generate_snapshot
from memlens.snapshot.store import cache
from memlens.views.layout import persist
from memlens.views.web.data import ViewerData
from shared_data import SHARED_SNAPSHOTS

WINDOWS = [(None, None), (0.0, 50.0), (1234.5, 9000.0), (15000.0, 15001.0), (300.0, 19000.0)]


def answers(path: Path, warming: bool = False) -> tuple[list[bytes], ViewerData]:
    data = ViewerData([memlens.load(path, warn=False)])
    dev = data.snapshots[0].default_device
    if warming:  # as while warm() builds the checkpoints in the background
        data.layout(0, dev)._warming = True
    out = []
    for e0, e1 in WINDOWS:
        for width, height, min_px in [(1300, 420, 1 / 16), (97, 50, 1.0)]:
            v = data.view(0, dev, width=width, height=height, e0=e0, e1=e1, min_px=min_px)
            out.append(json.dumps(v, separators=(",", ":")).encode())
    return out, data


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    path = tmp_path / "g.pickle"
    generate_snapshot(path, events=20_000, truncate=500)
    return path


def kept_dir(data: ViewerData) -> Path:
    snap = data.snapshots[0]
    dev = snap.device(snap.default_device)
    assert snap.cache_key is not None
    return cache.cache_root() / snap.cache_key / "derived" / persist.set_name(dev)


def layout_of(data: ViewerData):
    return data.layout(0, data.snapshots[0].default_device)


def test_kept_indexes_answer_byte_for_byte(generated):
    fresh, data = answers(generated)
    assert layout_of(data)._kept is False  # nothing kept yet: built
    data.warm()
    assert (kept_dir(data) / "meta.json").is_file() and layout_of(data)._kept is True
    again, data2 = answers(generated)
    assert layout_of(data2)._kept is True  # read back, not built
    assert again == fresh
    # the first viewport of a cold start skips the checkpoints: the same bytes
    warming, _ = answers(generated, warming=True)
    assert warming == fresh


def test_real_snapshot_kept_indexes_answer_byte_for_byte():
    path = SHARED_SNAPSHOTS / "wedson_medium_128_training.pickle"
    if not path.is_file():
        pytest.skip("shared snapshots not present")
    fresh, data = answers(path)
    data.warm()
    again, data2 = answers(path)
    assert layout_of(data2)._kept is True and again == fresh
    assert answers(path, warming=True)[0] == fresh


def _npy_data(path: Path) -> tuple[np.ndarray, int]:
    arr = np.load(path)
    return arr, path.stat().st_size - arr.nbytes  # header length


@pytest.mark.parametrize("how", ["bytes", "consistent", "parent", "missing", "free event"])
def test_tampered_or_stale_kept_indexes_are_rebuilt(generated, how):
    fresh, data = answers(generated)
    data.warm()
    kept = kept_dir(data)
    target = kept / "live_rows.npy"
    if how == "free event":  # a free event in size order past the trace, checksum matching
        target, how = kept / "by_size_free_event.npy", "consistent"
    arr, header = _npy_data(target)
    if how == "bytes":  # a flipped value: the crc32 no longer matches
        with open(target, "r+b") as fh:
            fh.seek(header)
            fh.write((int(arr[0]) + 1).to_bytes(arr.itemsize, "little"))
    elif how == "consistent":  # rewritten with a matching crc, pointing past the rows
        bad = arr.copy()
        bad[0] = 10**9
        np.save(target, bad)
        meta = json.loads((kept / "meta.json").read_text())
        meta["columns"][target.stem].update(cache._checksum_of(target))
        (kept / "meta.json").write_text(json.dumps(meta))
    elif how == "parent":  # kept for another entry
        meta = json.loads((kept / "meta.json").read_text())
        meta["parent"] = "0" * 32
        (kept / "meta.json").write_text(json.dumps(meta))
    else:
        (kept / "by_size.npy").unlink()
    again, data2 = answers(generated)
    lay = layout_of(data2)
    assert lay._kept is False and again == fresh  # rebuilt
    data2.warm()  # ... and kept again, sound this time
    assert lay._kept is True
    third, data3 = answers(generated)
    assert layout_of(data3)._kept is True and third == fresh


def test_a_changed_file_does_not_see_the_old_indexes(generated):
    _, data = answers(generated)
    data.warm()
    generate_snapshot(generated, events=20_000, truncate=700)  # another trace, same name
    fresh = answers(generated)[0]  # new entry: nothing kept for it yet
    _, data2 = answers(generated)
    assert layout_of(data2)._kept is False
    data2.warm()
    assert answers(generated)[0] == fresh


def test_no_cache_entry_nothing_kept(generated):
    data = ViewerData([memlens.load(generated, cache=False, warn=False)])
    data.warm()
    assert layout_of(data)._kept is False
    assert data.snapshots[0].cache_key is None


def test_a_trace_not_held_by_its_snapshot_is_not_matched(generated):
    import dataclasses

    _, data = answers(generated)
    data.warm()
    snap = memlens.load(generated, warn=False)
    dev = snap.device(snap.default_device)
    assert persist.load(dev) is not None
    other = dataclasses.replace(dev)  # same columns, but not the snapshot's own trace
    assert persist.load(other) is None
    assert persist.save(other, {}) is False

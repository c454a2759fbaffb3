"""Issue 37: a warm open reads no column its writer left untouched (the file's size,
mtime, ctime, inode and device as written vouch for it), and a column changed in any way
the file system records is still checked byte for byte: same size with the mtime set back,
or replaced by another file carrying the old mtime."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import memlens
from memlens.errors import CacheError
from memlens.snapshot.store import cache as column_cache


def _no_reads(*args: object, **kwargs: object) -> int:
    raise AssertionError("a column was read to be checked")


def _flip_last_byte(path: Path) -> bytes:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # inside the last value (the header holds the front of the file)
    return bytes(data)


def _same_size_mtime_set_back(path: Path) -> None:
    st = os.stat(path)
    path.write_bytes(_flip_last_byte(path))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_size == st.st_size


def _replaced_with_old_mtime(path: Path) -> None:
    other = path.with_suffix(".new")
    other.write_bytes(_flip_last_byte(path))
    shutil.copystat(path, other)  # mtime and mode of the original
    os.replace(other, path)


CHANGES: dict[str, Callable[[Path], None]] = {
    "same size, mtime set back": _same_size_mtime_set_back,
    "replaced, old mtime": _replaced_with_old_mtime,
}


def test_untouched_columns_are_not_read(hand_file, monkeypatch):
    truth = memlens.load(hand_file).device(0).active_after.tolist()
    monkeypatch.setattr(column_cache, "_file_crc", _no_reads)
    warm = column_cache.load(hand_file)
    assert warm is not None and warm.device(0).active_after.tolist() == truth


def test_manifest_records_each_file_as_written(hand_file):
    memlens.load(hand_file)
    entry, _ = column_cache.entry_dir(hand_file)
    meta = json.loads((entry / "meta.json").read_text())
    st = os.stat(entry / "d0.size.npy")
    assert meta["columns"]["d0.size"]["stat"] == [
        st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev
    ]  # fmt: skip


@pytest.mark.parametrize("how", list(CHANGES))
def test_changed_column_is_checked_and_caught(hand_file, how):
    memlens.load(hand_file)
    entry, _ = column_cache.entry_dir(hand_file)
    CHANGES[how](entry / "d0.size.npy")
    with pytest.raises(CacheError, match="d0.size was changed"):
        column_cache.load(hand_file)


def test_touched_but_equal_column_still_loads(hand_file):
    truth = memlens.load(hand_file, cache=False).device(0).size.tolist()
    memlens.load(hand_file)
    entry, _ = column_cache.entry_dir(hand_file)
    os.utime(entry / "d0.size.npy")  # a new mtime and ctime, the same bytes: the CRC says
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "cache entry unusable"
        again = memlens.load(hand_file)
    assert again.from_cache and again.device(0).size.tolist() == truth


@pytest.mark.parametrize("how", list(CHANGES))
def test_changed_derived_array_is_caught(hand_file, how):
    snap = memlens.load(hand_file)
    assert column_cache.save_derived(snap, "idx", {"a": np.arange(5, dtype=np.int64)})
    warm = memlens.load(hand_file)
    assert column_cache.load_derived(warm, "idx", ["a"]) is not None
    assert warm.cache_key is not None
    CHANGES[how](column_cache.cache_root() / warm.cache_key / "derived" / "idx" / "a.npy")
    with pytest.raises(CacheError, match="column a was changed"):
        column_cache.load_derived(warm, "idx", ["a"])

"""The cache's derived-array hook: arrays a layer above computes from the columns, kept in
the entry, checked like the columns, and gone with the entry."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

import memlens
from memlens.errors import CacheError
from memlens.snapshot.store import cache as column_cache

ARRAYS: dict[str, npt.NDArray[Any]] = {
    "a": np.array([3, 1, 2], dtype=np.int32),
    "b": np.array([7], dtype=np.int64),
}


def test_round_trip_memory_mapped(hand_file):
    cold = memlens.load(hand_file)
    assert cold.cache_key is not None  # the entry it wrote
    assert column_cache.load_derived(cold, "idx", ["a", "b"]) is None  # none kept yet
    assert column_cache.save_derived(cold, "idx", ARRAYS) is True
    warm = memlens.load(hand_file)
    assert warm.from_cache and warm.cache_key == cold.cache_key
    got = column_cache.load_derived(warm, "idx", ["a", "b"])
    assert got is not None and isinstance(got["a"], np.memmap)
    assert got["a"].tolist() == [3, 1, 2] and got["a"].dtype == np.int32
    assert got["b"].tolist() == [7]


def test_no_entry_nowhere_to_keep(hand_file):
    snap = memlens.load(hand_file, cache=False)
    assert snap.cache_key is None
    assert column_cache.save_derived(snap, "idx", ARRAYS) is False
    assert column_cache.load_derived(snap, "idx", ["a", "b"]) is None


def test_bad_name_refused(hand_file):
    snap = memlens.load(hand_file)
    for name in ["../x", ".hidden", "a/b", ""]:
        with pytest.raises(ValueError):
            column_cache.save_derived(snap, name, ARRAYS)


def test_damage_and_staleness_are_cache_errors(hand_file):
    snap = memlens.load(hand_file)
    column_cache.save_derived(snap, "idx", ARRAYS)
    where = column_cache.cache_root() / str(snap.cache_key) / "derived" / "idx"
    with pytest.raises(CacheError, match="not the set asked for"):
        column_cache.load_derived(snap, "idx", ["a"])
    meta = json.loads((where / "meta.json").read_text())
    (where / "meta.json").write_text(json.dumps({**meta, "parent": "f" * 32}))
    with pytest.raises(CacheError, match="stale"):
        column_cache.load_derived(snap, "idx", ["a", "b"])
    (where / "meta.json").write_text(json.dumps(meta))
    raw = bytearray((where / "a.npy").read_bytes())
    raw[-1] ^= 1
    (where / "a.npy").write_bytes(bytes(raw))
    with pytest.raises(CacheError, match="changed after it was written"):
        column_cache.load_derived(snap, "idx", ["a", "b"])


def test_they_go_with_the_entry(hand_file):
    snap = memlens.load(hand_file)
    column_cache.save_derived(snap, "idx", ARRAYS)
    column_cache.clear(hand_file)
    assert column_cache.load_derived(snap, "idx", ["a", "b"]) is None
    again = memlens.load(hand_file)  # a new entry, same key: nothing kept in it
    assert column_cache.load_derived(again, "idx", ["a", "b"]) is None

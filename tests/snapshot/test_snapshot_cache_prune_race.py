"""Pruning the cache while another process prunes it too (memlens fleet's workers share one
cache): an entry that vanishes between the listing and its mtime must not fail the save."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from memlens.snapshot.store import cache


def test_prune_skips_an_entry_another_process_just_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 2)
    entries = [tmp_path / f"entry{i}" for i in range(4)]
    for e in entries:
        e.mkdir()
    gone = entries[0]
    real_stat = Path.stat

    def stat(self: Path, *a: Any, **k: Any) -> os.stat_result:
        if self == gone:  # removed by another process after iterdir listed it
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return real_stat(self, *a, **k)

    monkeypatch.setattr(Path, "stat", stat)
    cache._prune(tmp_path, keep=entries[3])
    monkeypatch.setattr(Path, "stat", real_stat)
    left = sorted(p.name for p in tmp_path.iterdir())
    # entry0 "vanished" (its directory is still here: only its stat failed), so it is not
    # counted: entry1, entry2 and `keep` make 3 > MAX_ENTRIES=2, and the older one goes
    assert len(left) == 3 and "entry0" in left and "entry3" in left


def test_prune_keeps_everything_under_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 8)
    for i in range(3):
        (tmp_path / f"entry{i}").mkdir()
    cache._prune(tmp_path, keep=tmp_path / "entry0")
    assert len(list(tmp_path.iterdir())) == 3

"""open_snapshot: a snapshot's own warnings become `memlens: warning:` lines; any other
warning raised while loading (numpy's, a deprecation) still reaches Python's filters."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

import memlens.snapshot.loader as loader
from memlens.cli.options import open_snapshot
from memlens.snapshot.loader import SnapshotWarning


def test_other_warnings_are_not_dropped(monkeypatch, hand_file, capsys):
    real_load = loader.load_then_cache

    def load(path, cache=True):
        warnings.warn("x.pickle: 2 frames without a name", SnapshotWarning, stacklevel=1)
        warnings.warn("numpy said something", RuntimeWarning, stacklevel=1)
        return real_load(path, cache=cache)

    monkeypatch.setattr(loader, "load_then_cache", load)
    with pytest.warns(RuntimeWarning, match="^numpy said something$") as caught:
        open_snapshot(str(hand_file), no_cache=True)
    assert [w.category for w in caught] == [RuntimeWarning]
    assert capsys.readouterr().err == "memlens: warning: x.pickle: 2 frames without a name\n"


def test_a_deferred_cache_write_warns_as_the_load_did(monkeypatch, hand_file, capsys, tmp_path):
    """memlens view writes a cold load's cache after printing its URL: a failure then is the
    same one-line warning, and the snapshot in memory goes on being served."""
    from memlens.snapshot.store import cache

    def full_disk(snap, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setenv("MEMLENS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cache, "save", full_disk)
    writes: list[Callable[[], None]] = []
    snap = open_snapshot(str(hand_file), cache_writes=writes)
    assert capsys.readouterr().err == "" and len(writes) == 1  # nothing written yet
    writes[0]()
    assert capsys.readouterr().err == (
        "memlens: warning: could not write the column cache ([Errno 28] No space left on "
        "device); continuing without it\n"
    )
    assert snap.cache_key is None and snap.device(0).n_events > 0

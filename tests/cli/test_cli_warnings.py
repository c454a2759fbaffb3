"""open_snapshot: a snapshot's own warnings become `memlens: warning:` lines; any other
warning raised while loading (numpy's, a deprecation) still reaches Python's filters."""

from __future__ import annotations

import warnings

import pytest

import memlens.snapshot.loader as loader
from memlens.cli.options import open_snapshot
from memlens.snapshot.loader import SnapshotWarning


def test_other_warnings_are_not_dropped(monkeypatch, hand_file, capsys):
    real_load = loader.load

    def load(path, cache=True):
        warnings.warn("x.pickle: 2 frames without a name", SnapshotWarning, stacklevel=1)
        warnings.warn("numpy said something", RuntimeWarning, stacklevel=1)
        return real_load(path, cache=cache)

    monkeypatch.setattr(loader, "load", load)
    with pytest.warns(RuntimeWarning, match="^numpy said something$") as caught:
        open_snapshot(str(hand_file), no_cache=True)
    assert [w.category for w in caught] == [RuntimeWarning]
    assert capsys.readouterr().err == "memlens: warning: x.pickle: 2 frames without a name\n"

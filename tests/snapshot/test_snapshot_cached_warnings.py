"""d2: a snapshot's warnings are said on every load, not only on the cold one. The column
cache keeps them; a cache hit re-emits them worded exactly as the cold load did."""

from __future__ import annotations

import pickle
import warnings

import pytest

import memlens
from memlens.cli.main import main
from memlens.snapshot.loader import SnapshotWarning
from snapshot_builders import ev

UNKNOWN = "unknown trace action 'annotate_future'"


@pytest.fixture
def snap_file(tmp_path):
    trace = [
        ev("segment_alloc", 0x10000, 2 * 1024 * 1024),
        ev("alloc", 0x10000, 512, 1),
        ev("annotate_future", 0x10000, 0, 2),
        ev("free_completed", 0x10000, 512, 3),
    ]
    path = tmp_path / "w.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [trace]}))
    return path


def _load_warnings(path) -> tuple[bool, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        snap = memlens.load(path)
    return snap.from_cache, [
        str(w.message) for w in caught if issubclass(w.category, SnapshotWarning)
    ]


def test_cache_hit_warns_as_the_cold_load(snap_file):
    cold_hit, cold = _load_warnings(snap_file)
    hot_hit, hot = _load_warnings(snap_file)
    assert (cold_hit, hot_hit) == (False, True)
    assert len(cold) == 1 and UNKNOWN in cold[0] and cold[0].startswith(f"{snap_file}: ")
    assert hot == cold
    # asked not to warn, neither path does
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert memlens.load(snap_file, warn=False).from_cache
    assert not caught


def test_peak_twice_warns_twice(snap_file, capsys):
    errs = []
    for _ in range(2):
        main(["peak", str(snap_file)])
        errs.append(capsys.readouterr().err)
    assert errs[0] == errs[1]
    assert errs[0].count(UNKNOWN) == 1 and errs[0].startswith("memlens: warning: ")

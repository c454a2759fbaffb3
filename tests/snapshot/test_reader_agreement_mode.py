"""MEMLENS_READER=both (memlens.snapshot.reader_agreement): each snapshot built on the
compiled and on the Python path and compared. The README's test command runs the whole
suite this way, so this mode must say every difference and keep quiet when there is none."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest

import memlens
from memlens.snapshot.loader import SnapshotWarning
from memlens.snapshot.read import compiled
from memlens.snapshot.reader_agreement import ReadersDisagree, differences
from memlens.snapshot.replay import device as replay

pytestmark = pytest.mark.skipif(not compiled.available(), reason="compiled reader not built")


@pytest.fixture
def both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compiled.READER_ENV, "both")


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    path = tmp_path / "g.pickle"
    memlens.generate_snapshot(path, events=400)
    return path


def test_both_ways_is_the_default_snapshot(generated, both, monkeypatch):
    snap = memlens.load(generated, cache=False)
    monkeypatch.setenv(compiled.READER_ENV, "python")
    python = memlens.load(generated, cache=False)
    monkeypatch.setenv(compiled.READER_ENV, "auto")
    default = memlens.load(generated, cache=False)
    assert differences(snap, default) == [] and differences(snap, python) == []
    assert snap.device(0).n_events > 0


def test_a_replay_that_differs_is_named(generated, both, monkeypatch):
    numpy_replay = replay._replay_numpy

    def off_by_one(*args, **kwargs):
        cols = numpy_replay(*args, **kwargs)
        cols["active_after"] = cols["active_after"] + 1
        return cols

    monkeypatch.setattr(replay, "_replay_numpy", off_by_one)
    with pytest.raises(ReadersDisagree, match="1 differences.*device 0 active_after"):
        memlens.load(generated, cache=False)


def test_a_table_that_differs_is_named(generated, both, monkeypatch):
    original = compiled.load_compiled

    def renamed(path, warn):
        snap = original(path, warn)
        assert snap is not None  # the compiled reader reads a generated file itself
        snap.strings = [*snap.strings[:-1], "not what the Python path read"]
        return snap

    monkeypatch.setattr("memlens.snapshot.loader.load_compiled", renamed)
    with pytest.raises(ReadersDisagree, match="strings: "):
        memlens.load(generated, cache=False)


def test_a_refusal_on_one_path_only_is_a_disagreement(generated, both, monkeypatch):
    def refuses(path, warn):
        raise memlens.SnapshotError(f"{path}: refused by the compiled path alone")

    monkeypatch.setattr("memlens.snapshot.loader.load_compiled", refuses)
    # not a SnapshotError: a test expecting a refusal must not take it for one
    with pytest.raises(ReadersDisagree, match="compiled path refused it .* Python path built"):
        memlens.load(generated, cache=False)


def test_refused_alike_is_the_refusal_itself(generated, both):
    generated.write_bytes(generated.read_bytes()[:-40])  # truncated
    with pytest.raises(memlens.SnapshotError) as caught:
        memlens.load(generated, cache=False)
    assert not isinstance(caught.value, AssertionError)
    assert "truncated" in str(caught.value) or "ends" in str(caught.value)


def test_warnings_are_said_once(tmp_path, both):
    raw = memlens.generate_snapshot(None, events=50)
    raw["device_traces"][0][3]["action"] = "annotate_future"
    path = tmp_path / "u.pickle"
    path.write_bytes(pickle.dumps(raw, protocol=4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        snap = memlens.load(path, cache=False)
    said = [str(w.message) for w in caught if w.category is SnapshotWarning]
    assert said == [f"{path}: {m}" for m in snap.warnings]
    assert len(said) == 1 and "annotate_future" in said[0]


def test_in_memory_sources_are_compared_too(both, monkeypatch):
    raw = memlens.generate_snapshot(None, events=60)
    snap = memlens.load(raw)
    assert np.asarray(snap.device(0).active_after).size > 0
    numpy_replay = replay._replay_numpy
    monkeypatch.setattr(
        replay,
        "_replay_numpy",
        lambda *a, **k: {**numpy_replay(*a, **k), "baseline_bytes": -1},
    )
    with pytest.raises(ReadersDisagree, match="device 0 baseline_bytes"):
        memlens.load(raw)


def test_an_unknown_choice_names_them_all(generated, monkeypatch):
    monkeypatch.setenv(compiled.READER_ENV, "bogus")
    with pytest.raises(memlens.SnapshotError, match="auto, python, compiled or both"):
        memlens.load(generated, cache=False)


def test_a_limit_reached_on_both_paths_is_the_refusal(hand_file, both, monkeypatch):
    """The two paths stop at another value (the compiled reader counts as it scans, the
    Python path as it builds), so only the parenthesis differs; the limit, its figure and
    the advice are the same, and that is the refusal."""
    from memlens.snapshot.limits import LimitExceeded

    monkeypatch.setenv("MEMLENS_MAX_ITEMS", "20")
    with pytest.raises(LimitExceeded, match="more than 20 values walked") as caught:
        memlens.load(hand_file, cache=False)
    assert "--limit items=80" in str(caught.value)
    monkeypatch.setenv("MEMLENS_MAX_ITEMS", "0")
    assert memlens.load(hand_file, cache=False).device(0).n_events > 0

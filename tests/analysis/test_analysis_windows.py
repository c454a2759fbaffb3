"""The vectorized window helpers the stage table stands on, against plain loops."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from memlens.analysis.events import paused_gc, window_argmax, window_max


def test_window_argmax_is_the_first_maximum():
    v = np.array([3, 9, 1, 9, 4, 4, 7, 2], dtype=np.int64)
    # windows across every length class: one event, short, ties (first 9 wins), to the end
    start = np.array([0, 1, 2, 0, 4, 6, 7])
    stop = np.array([1, 4, 4, 8, 6, 8, 8])
    assert window_argmax(v, start, stop).tolist() == [0, 1, 3, 1, 4, 6, 7]
    assert window_argmax(v, start[:0], stop[:0]).tolist() == []


@pytest.mark.parametrize("short", [1, 8, 64])
def test_window_argmax_and_max_match_a_loop(short):
    rng = np.random.default_rng(7)
    v = rng.integers(-5, 5, size=4000).astype(np.int64)  # many ties
    start = rng.integers(0, 3990, size=2500)
    length = np.concatenate([rng.integers(1, 10, 1500), rng.integers(1, 300, 1000)])
    stop = np.minimum(start + length, len(v))
    got = window_argmax(v, start, stop, short=short)
    want = [a + int(np.argmax(v[a:b])) for a, b in zip(start.tolist(), stop.tolist())]
    assert got.tolist() == want
    assert window_max(v, start, stop).tolist() == [int(v[a:b].max()) for a, b in zip(start, stop)]


def test_paused_gc_restores_the_collector():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # it was off before: left off
    finally:
        gc.enable()
    with pytest.raises(ValueError), paused_gc():
        raise ValueError
    assert gc.isenabled()


def _nested_sequence(
    rng: np.random.Generator, n_stages: int
) -> tuple[list[int], list[int], list[int]]:
    """A random well-nested START/END sequence with repeated names and OTHER markers."""
    ids: list[int] = []
    stage: list[int] = []
    open_: list[int] = []
    while n_stages or open_:
        if n_stages and (not open_ or rng.random() < 0.55):
            name = int(rng.integers(0, 4))
            ids.append(name)
            stage.append(0)
            open_.append(name)
            n_stages -= 1
        else:
            ids.append(open_.pop())
            stage.append(1)
        if rng.random() < 0.1:
            ids.append(9)
            stage.append(2)  # OTHER: takes no part in pairing
    return ids, stage, list(range(len(ids)))


def test_vectorized_pairing_equals_the_loop():
    from memlens.analysis.stage_pairing import pair_loop, pair_nested

    rng = np.random.default_rng(3)
    for trial in range(30):
        ids, stage, times = _nested_sequence(rng, int(rng.integers(1, 60)))
        args = np.array(ids), np.array(stage, np.int8), np.array(times)
        fast = pair_nested(*args)
        slow = pair_loop([f"s{i}" for i in ids], args[1], args[2])
        assert fast is not None, trial
        for got, want in zip(fast, slow):
            assert got.tolist() == want.tolist(), trial


@pytest.mark.parametrize(
    "ids, stage",
    [
        ([0, 1, 0, 1], [0, 0, 1, 1]),  # an END closes a START that is not the innermost
        ([0, 0, 1], [1, 0, 1]),  # an END before any START (began before the trace)
        ([0, 1, 1], [0, 0, 1]),  # a START never ended
        ([0, 1], [0, 1]),  # names differ
    ],
)
def test_vectorized_pairing_leaves_the_odd_cases_to_the_loop(ids, stage):
    from memlens.analysis.stage_pairing import pair_nested

    args = np.array(ids), np.array(stage, np.int8), np.arange(len(ids))
    assert pair_nested(*args) is None

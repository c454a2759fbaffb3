"""One event check for every query and analysis that takes an event index: the same
error type (a MemlensError, so the CLI prints one line and exits 2) and the same message."""

from __future__ import annotations

import pickle
from collections.abc import Callable

import pytest

import memlens
from memlens.analysis.allocator_state import state_at
from memlens.analysis.peak import Point, live_set, resolve_event
from memlens.cli.main import main
from memlens.errors import EventOutOfRange, MemlensError
from snapshot_builders import hand_snapshot

OUTSIDE = "event {} is outside this trace (events 0..9, or -1 for before the first)"


@pytest.fixture
def dev():
    return memlens.load(hand_snapshot()).device(0)


@pytest.mark.parametrize("event", [10, -2])
def test_every_entry_point_raises_the_same_error(dev, event):
    calls: list[Callable[[], object]] = [
        lambda: dev.active_at(event),
        lambda: dev.reserved_at(event),
        lambda: dev.live_at(event),
        lambda: live_set(dev, event),
        lambda: resolve_event(dev, Point(event=event)),
        lambda: state_at(dev, event),
    ]
    for call in calls:
        with pytest.raises(EventOutOfRange) as info:
            call()
        assert str(info.value) == OUTSIDE.format(event)
        assert isinstance(info.value, MemlensError) and isinstance(info.value, IndexError)


def test_negative_indices_do_not_count_from_the_end(dev):
    # -1 is the state before the first event, not the last one
    assert dev.check_event(-1) == -1 and dev.active_at(-1) == dev.baseline_bytes
    assert dev.check_event(9) == 9
    with pytest.raises(EventOutOfRange):
        resolve_event(dev, Point(event=-3))


def test_a_trace_without_events_says_so():
    snap = memlens.load({"segments": [], "device_traces": [[]]})
    dev = snap.traces[0]
    assert dev.check_event(-1) == -1
    with pytest.raises(EventOutOfRange, match="device 0 has no trace events"):
        dev.active_at(0)


def test_cli_prints_one_line_and_exits_2(tmp_path, capsys):
    path = tmp_path / "hand.pickle"
    path.write_bytes(pickle.dumps(hand_snapshot()))
    with pytest.raises(SystemExit) as info:
        main(["at", str(path), "--event", "-2"])
    assert info.value.code == 2
    assert capsys.readouterr().err == f"memlens: error: {OUTSIDE.format(-2)}\n"

"""The compiled replay (csrc/replay.c) and the numpy one give the same DeviceTrace, to the byte.

Each trace is replayed twice from the same snapshot and event columns: as is (compiled)
and with MEMLENS_READER=python (numpy). Every column must have the same dtype, shape and
bytes, every figure the same value and type, and the same warnings must be raised. Exact
figures are checked too where a case is small enough to work out by hand.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import memlens
from memlens.snapshot.actions import Action
from memlens.snapshot.model import (
    GHOST,
    LIVE_AT_END,
    OVERWRITTEN,
    PENDING_FREE,
    PREEXISTING,
    DeviceTrace,
    Snapshot,
)
from memlens.snapshot.native import READER_ENV, built_replay, native_replay
from memlens.snapshot.replay import device as replay
from snapshot_builders import block, ev, hand_snapshot, segment

pytestmark = pytest.mark.skipif(built_replay() is None, reason="compiled replay not built")

EVENT_FIELDS = (
    "action", "addr", "size", "stream", "time_us", "stack", "pool",
    "compile_context", "user_metadata", "forward_stack",
)  # fmt: skip
X, Y, Z, W = 0x1000, 0x1200, 0x1400, 0x1600


@contextmanager
def _reader(mode: str) -> Iterator[None]:
    old = os.environ.get(READER_ENV)
    os.environ[READER_ENV] = mode
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(READER_ENV, None)
        else:
            os.environ[READER_ENV] = old


def _replay(snap: Snapshot, device: int, mode: str) -> tuple[DeviceTrace, list[tuple[str, str]]]:
    t = snap.traces[device]
    events = {k: getattr(t, k) for k in EVENT_FIELDS}
    warned: list[tuple[str, str]] = []
    with _reader(mode):
        assert (native_replay() is None) == (mode == "python")
        out = replay.replay_device(snap, device, events, lambda key, msg: warned.append((key, msg)))
    return out, warned


def assert_same_both_ways(snap: Snapshot) -> dict[int, DeviceTrace]:
    """Replay each device both ways; the compiled traces, once checked equal."""
    out = {}
    for device in snap.traces:
        fast, fast_warned = _replay(snap, device, "compiled")
        slow, slow_warned = _replay(snap, device, "python")
        assert fast_warned == slow_warned
        for f in dataclasses.fields(DeviceTrace):
            if f.name == "snapshot":
                continue
            a, b = getattr(fast, f.name), getattr(slow, f.name)
            if isinstance(b, np.ndarray):
                assert isinstance(a, np.ndarray), f.name
                assert (a.dtype, a.shape) == (b.dtype, b.shape), f.name
                assert a.tobytes() == b.tobytes(), f"{f.name}: {a.tolist()} != {b.tolist()}"
            else:
                assert (type(a), a) == (type(b), b), f.name
        out[device] = fast
    return out


def _load(snap: dict[str, Any]) -> Snapshot:
    # built on the compiled replay whatever the run's reader: the tests replay its traces
    # both ways themselves (MEMLENS_READER=both would only do it a second time)
    with _reader("compiled"):
        return memlens.load(snap, warn=False)


# --- hand-built cases, exact figures --------------------------------------------------------


def test_hand_example():
    d = assert_same_both_ways(_load(hand_snapshot()))[0]
    assert d.alloc_event.tolist() == [-1, -1, 1, 2, 6, 8]
    assert d.active_after.tolist() == [1050, 1150, 1350, 1350, 1250, 1200, 1500, 1500, 1510, 1310]


def test_orphans_and_requests_before_and_after():
    trace = [
        ev("free_requested", X, 10),  # 0  waits: the orphan free at 1 takes it
        ev("free_completed", X, 10),  # 1  orphan (allocated before the trace)
        ev("free_requested", Y, 5),  # 2  nothing open, and an alloc comes next: no row
        ev("alloc", Y, 7),  # 3
        ev("free_requested", Y, 7),  # 4  the first request counts
        ev("free_requested", Y, 7),  # 5
        ev("free_completed", Y, 7),  # 6
        ev("alloc", X, 20),  # 7  X again: version 1
    ]
    d = assert_same_both_ways(_load({"segments": [], "device_traces": [trace]}))[0]
    assert d.alloc_event.tolist() == [-1, 3, 7]
    assert d.free_event.tolist() == [1, 6, 8]
    assert d.free_requested_event.tolist() == [0, 4, -1]
    assert d.alloc_version.tolist() == [0, 0, 1]
    assert d.alloc_size.tolist() == [10, 7, 20]
    assert d.alloc_flags.tolist() == [PREEXISTING, 0, LIVE_AT_END]
    assert d.alloc_row.tolist() == [0, 0, -1, 1, 1, 1, 1, 2]
    assert d.version.tolist() == [0, 0, -1, 0, 0, 0, 0, 1]
    assert d.baseline_bytes == 10
    assert d.active_after.tolist() == [10, 0, 0, 7, 7, 7, 0, 20]


def test_overwritten_alloc_and_ghosts():
    trace = [
        ev("alloc", Y, 5),  # 0
        ev("free_completed", Y, 5),  # 1
        ev("alloc", X, 10),  # 2  overwritten by 4: alive to the end, request pending
        ev("free_requested", X, 10),  # 3
        ev("alloc", X, 20),  # 4
        ev("free_completed", X, 20),  # 5
    ]
    blocks = [
        block(X, 512, 10, "active_allocated"),  # the overwritten allocation: not a ghost
        block(Y, 512, 64, "active_allocated"),  # ghost after one ended allocation: version 1
        block(Z, 512, 128, "active_allocated"),  # ghost
        block(W, 512, 256, "active_pending_free"),  # not a candidate
    ]
    snap = _load({"segments": [segment(X, blocks, stream=0)], "device_traces": [trace]})
    d = assert_same_both_ways(snap)[0]
    assert d.alloc_addr.tolist() == [Y, Z, Y, X, X]
    assert d.alloc_event.tolist() == [-1, -1, 0, 2, 4]
    assert d.free_event.tolist() == [6, 6, 1, 6, 5]
    assert d.free_requested_event.tolist() == [-1, -1, -1, 3, -1]
    assert d.alloc_version.tolist() == [1, 0, 0, 0, 0]
    assert d.alloc_flags.tolist() == [
        PREEXISTING | GHOST | LIVE_AT_END,
        PREEXISTING | GHOST | LIVE_AT_END,
        0,
        OVERWRITTEN | LIVE_AT_END | PENDING_FREE,
        0,
    ]
    assert d.alloc_row.tolist() == [2, 2, 3, 3, 4, 4]
    assert d.baseline_bytes == 192
    assert d.active_after.tolist() == [197, 192, 202, 202, 222, 202]
    assert d.reserved_start_bytes == 2048
    assert d.reserved_after.tolist() == [2048] * 6


def test_requested_only_trace():
    trace = [
        ev("alloc", X, 10),
        ev("free_requested", X, 10),
        ev("free_requested", Y, 3),  # an orphan
        ev("alloc", X, 4),
    ]
    d = assert_same_both_ways(_load({"segments": [], "device_traces": [trace]}))[0]
    assert d.frees_from_requested is True
    assert d.free_event.tolist() == [2, 1, 4]
    assert d.active_after.tolist() == [13, 3, 0, 4]


@pytest.mark.parametrize("with_segments", [False, True])
def test_segment_events(with_segments):
    trace = [
        ev("segment_free", X, 4096),
        ev("segment_alloc", X, 8192),
        ev("alloc", X, 100),
        ev("segment_map", Z, 2048),
        ev("segment_unmap", Z, 1024),
        ev("snapshot", 0, 0),
        ev("oom", 5000, 0, device_free=5000),
    ]
    segs = [segment(X, [block(X, 8192, 100, "active_allocated")])] if with_segments else []
    d = assert_same_both_ways(_load({"segments": segs, "device_traces": [trace]}))[0]
    if with_segments:  # anchored: 8192 at the end, the events added 5120
        assert d.reserved_start_bytes == 3072
    else:  # as low as the events allow
        assert d.reserved_start_bytes == 4096
    start = d.reserved_start_bytes
    assert d.reserved_after.tolist() == [
        start - 4096, start + 4096, start + 4096, start + 6144, start + 5120, start + 5120,
        start + 5120,
    ]  # fmt: skip


def test_empty_traces():
    segs = [segment(X, [block(X, 512, 100, "active_allocated")], device=1)]
    traces = assert_same_both_ways(_load({"segments": segs, "device_traces": [[], []]}))
    assert traces[0].n_events == 0 and traces[0].n_allocations == 0
    assert traces[1].n_events == 0 and traces[1].alloc_flags.tolist() == [
        PREEXISTING | GHOST | LIVE_AT_END
    ]
    assert traces[1].baseline_bytes == 100 and traces[1].reserved_start_bytes == 512
    assert traces[1].reserved_after.dtype == np.int64 and len(traces[1].reserved_after) == 0


def test_several_devices_and_unknown_actions():
    t0 = [ev("alloc", X, 1), ev("some_future_action", X, 9), ev("free_completed", X, 1)]
    t1 = [ev("free_completed", X, 2), ev("alloc", X, 3)]
    segs = [segment(Y, [block(Y, 512, 50, "active_allocated")], device=1)]
    traces = assert_same_both_ways(_load({"segments": segs, "device_traces": [t0, t1]}))
    assert traces[0].active_after.tolist() == [1, 1, 0]
    assert traces[1].active_after.tolist() == [50, 53]


# --- random traces ---------------------------------------------------------------------------

ADDRS = [X, Y, Z, W, 0x1800]
ACTIONS = [
    "alloc", "alloc", "free_completed", "free_requested", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom",
]  # fmt: skip
STATES = ["active_allocated", "inactive", "active_pending_free"]


@st.composite
def snapshots(draw: st.DrawFn) -> dict[str, Any]:
    n_devices = draw(st.integers(1, 2))
    traces = []
    for _ in range(n_devices):
        raw = draw(
            st.lists(
                st.tuples(st.sampled_from(ACTIONS), st.sampled_from(ADDRS), st.integers(0, 5000)),
                max_size=40,
            )
        )
        if draw(st.booleans()):  # some traces have no free_completed at all
            raw = [r for r in raw if r[0] != "free_completed"]
        traces.append(
            [
                ev(a, addr, size, t, stream=t % 2, device_free=size)
                if a == "oom"
                else ev(a, addr, size, t, stream=t % 2)
                for t, (a, addr, size) in enumerate(raw)
            ]
        )
    segs = []
    for device in range(draw(st.integers(0, n_devices))):
        blocks = draw(
            st.lists(
                st.tuples(st.sampled_from(ADDRS), st.sampled_from(STATES), st.integers(0, 512)),
                max_size=6,
            )
        )
        if blocks:
            segs.append(
                segment(
                    X,
                    [block(a, 512, req, state) for a, state, req in blocks],
                    device=device,
                    stream=device,
                )
            )
    return {"segments": segs, "device_traces": traces}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_random_traces_same_both_ways(snap):
    assert_same_both_ways(_load(snap))


# --- the compiled function itself, on any input ---------------------------------------------

CODES = (
    int(Action.ALLOC), int(Action.FREE_COMPLETED), int(Action.FREE_REQUESTED),
    bytes([Action.SEGMENT_ALLOC, Action.SEGMENT_MAP]),
    bytes([Action.SEGMENT_FREE, Action.SEGMENT_UNMAP]),
)  # fmt: skip


EVENT_ARGS = ("action", "addr", "size", "stack", "stream")
GHOST_ARGS = ("ghost_addr", "ghost_size", "ghost_stack", "ghost_stream")
CODE_ARGS = ("alloc_code", "free_code", "request_code", "grow_codes", "shrink_codes")


def _call(fast: Any, events: Any, ghosts: Any, codes: Any, requests_as_frees: Any, end: Any) -> Any:
    """fast.replay with its keyword arguments made from the three groups (a group short of
    values leaves the rest unnamed: TypeError)."""
    kwargs = {**dict(zip(EVENT_ARGS, events)), **dict(zip(GHOST_ARGS, ghosts))}
    kwargs.update(zip(CODE_ARGS, codes))
    return fast.replay(**kwargs, requests_as_frees=requests_as_frees, end_reserved=end)


def _columns(n: int) -> tuple[np.ndarray, ...]:
    return (
        np.zeros(n, np.uint8),
        np.zeros(n, np.uint64),
        np.zeros(n, np.int64),
        np.zeros(n, np.int32),
        np.zeros(n, np.int32),
    )


def _ghosts(n: int) -> tuple[np.ndarray, ...]:
    return (
        np.zeros(n, np.uint64),
        np.zeros(n, np.int64),
        np.zeros(n, np.int32),
        np.zeros(n, np.int32),
    )


@pytest.mark.parametrize(
    "events, ghosts, codes, end, match",
    [
        ((*_columns(3)[:4], np.zeros(2, np.int32)), _ghosts(0), CODES, None, "stream has 2"),
        ((np.zeros(3, np.int8), *_columns(3)[1:]), _ghosts(0), CODES, None, "action must be"),
        ((*_columns(3)[:2], np.zeros(3, np.uint64), *_columns(3)[3:]), _ghosts(0), CODES, None, "size must be"),
        ((*_columns(3)[:3], np.zeros(3, np.int64), _columns(3)[4]), _ghosts(0), CODES, None, "stack must be"),
        ((_columns(4)[0].reshape(2, 2), *_columns(4)[1:]), _ghosts(0), CODES, None, "action must be"),
        ((_columns(3)[0], _columns(3)[1].astype(">u8"), *_columns(3)[2:]), _ghosts(0), CODES, None, "addr must be"),
        ((*_columns(3)[:4], _columns(6)[4][::2]), _ghosts(0), CODES, None, None),
        (_columns(3), (*_ghosts(2)[:3], np.zeros(1, np.int32)), CODES, None, "ghost stream has 1"),
        (_columns(3), _ghosts(1), (300, *CODES[1:]), None, "action codes"),
        (_columns(3), _ghosts(1), (-2, *CODES[1:]), None, "action codes"),
        (_columns(3), _ghosts(1), CODES, 1 << 70, "int64 range"),
        (_columns(3), _ghosts(1), CODES, "12", "an int or None"),
    ],
)  # fmt: skip
def test_bad_arguments_are_value_errors(events, ghosts, codes, end, match):
    fast = built_replay()
    assert fast is not None
    with pytest.raises((ValueError, BufferError, TypeError), match=match):
        _call(fast, events, ghosts, codes, True, end)


def test_bad_argument_shapes_are_type_errors():
    fast = built_replay()
    assert fast is not None
    with pytest.raises(TypeError):
        _call(fast, _columns(3)[:4], _ghosts(0), CODES, True, None)
    with pytest.raises(TypeError):
        _call(fast, (1, 2, 3, 4, 5), _ghosts(0), CODES, True, None)
    with pytest.raises(TypeError, match="keyword arguments only"):
        fast.replay(*_columns(3), *_ghosts(0), *CODES, True, None)


INT64 = st.integers(-(1 << 63), (1 << 63) - 1)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(
        st.tuples(
            st.integers(0, 20),  # action code, known or not
            st.sampled_from([0, 1, 2, 0x200, (1 << 64) - 1]),
            INT64,
            st.integers(-(1 << 31), (1 << 31) - 1),
        ),
        max_size=30,
    ),
    ghost_rows=st.lists(
        st.tuples(st.sampled_from([0, 1, 2, 0x200, (1 << 64) - 1]), INT64), max_size=4
    ),
    end=st.none() | INT64,
)
def test_any_values_never_crash_and_agree_where_numpy_can(rows, ghost_rows, end):
    """Values no snapshot can hold (the loader refuses them): the compiled replay wraps
    int64 sums like numpy does, and never crashes."""
    fast = built_replay()
    assert fast is not None
    n = len(rows)
    columns: dict[str, npt.NDArray[Any]] = {
        "action": np.array([r[0] for r in rows], np.uint8),
        "addr": np.array([r[1] for r in rows], np.uint64),
        "size": np.array([r[2] for r in rows], np.int64),
        "stack": np.array([r[3] for r in rows], np.int32),
        "stream": np.array([r[3] for r in rows], np.int32),
    }
    ghosts = replay._Candidates(
        addr=np.array([g[0] for g in ghost_rows], np.uint64),
        size=np.array([g[1] for g in ghost_rows], np.int64),
        stack=np.arange(len(ghost_rows), dtype=np.int32),
        stream=np.zeros(len(ghost_rows), np.int32),
    )
    got = replay._replay_compiled(fast, columns, ghosts, end)
    assert len(got["active_after"]) == len(got["reserved_after"]) == n
    try:
        with np.errstate(over="ignore"):
            want = replay._replay_numpy(columns, ghosts, end)
    except OverflowError:  # a Python-int figure past int64: numpy cannot add it
        return
    assert got.keys() == want.keys()
    for k, b in want.items():
        a = got[k]
        if isinstance(b, np.ndarray):
            assert (a.dtype, a.tobytes()) == (b.dtype, b.tobytes()), k
        else:
            assert (type(a), a) == (type(b), b), k


CODE = st.integers(-1, 5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    actions=st.lists(st.integers(0, 5), max_size=30),
    n_ghosts=st.integers(0, 3),
    codes=st.tuples(CODE, CODE, CODE, st.binary(max_size=3), st.binary(max_size=3)),
    requests_as_frees=st.booleans(),
)
def test_any_action_codes_never_crash(actions, n_ghosts, codes, requests_as_frees):
    """Codes that coincide or are absent (the loader never passes such): rows stay within
    their arrays and every event's row is a real one."""
    fast = built_replay()
    assert fast is not None
    n = len(actions)
    events = (np.array(actions, np.uint8), np.arange(n, dtype=np.uint64) % 3, *_columns(n)[2:])
    ghosts = (np.arange(n_ghosts, dtype=np.uint64), *_ghosts(n_ghosts)[1:])
    out = _call(fast, events, ghosts, codes, requests_as_frees, None)
    rows = np.frombuffer(out["alloc_event"], np.int64)
    row_of = np.frombuffer(out["alloc_row"], np.int32)
    assert len(row_of) == n and row_of.max(initial=-1) < len(rows)
    assert out["ghosts"] + out["orphans"] <= len(rows)
    for name in ("free_event", "free_requested_event", "alloc_size", "alloc_addr"):
        assert memoryview(out[name]).nbytes == 8 * len(rows)


# --- real snapshots --------------------------------------------------------------------------


def _real_names() -> list[str]:
    from shared_data import real_snapshot_names

    return real_snapshot_names()


@pytest.mark.parametrize("name", _real_names() or ["(none)"])
def test_real_snapshots_same_both_ways(name):
    from shared_data import SHARED_LABEL, SHARED_SNAPSHOTS

    if name == "(none)":
        pytest.skip(f"no real snapshots in {SHARED_LABEL}")
    with _reader("compiled"):  # as _load: the replays below are both ways
        snap = memlens.load(SHARED_SNAPSHOTS / name, cache=False, warn=False)
    assert_same_both_ways(snap)

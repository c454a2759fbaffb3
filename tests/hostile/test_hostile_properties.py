"""Property: a random mutation of a real or generated snapshot, structural (one value
anywhere replaced by a hostile one) or byte-level (flipped, cut, spliced), holds the same
line as the corpus: exit 0 or 2 in its own process, no traceback, no negative or
overflowed figure. Real snapshots come from ../shared/snapshots (skipped when absent)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest
from corpus import BAD_VALUES, HOSTILE_TEXT, _laughs, base_snapshot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from run_corpus import run, warm_up
from test_hostile_corpus import check

from memlens.snapshot.read.safe_pickle import loads_plain_pickle
from shared_data import SHARED_SNAPSHOTS
from snapshot_builders import hand_snapshot

SETTINGS = settings(
    max_examples=6,
    deadline=None,
    derandomize=True,  # the same cases every run: a failure reproduces
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
REPLACEMENTS = [*BAD_VALUES.values(), *HOSTILE_TEXT.values(), _laughs(24), [], {}, 0, -1]
SMALLEST_REAL = 2  # real files per run (the smallest: each example reloads one)


def _sources() -> list[tuple[str, bytes]]:
    out = [
        ("generated-base", pickle.dumps(base_snapshot(), protocol=4)),
        ("generated-hand", pickle.dumps(hand_snapshot(), protocol=2)),
    ]
    if SHARED_SNAPSHOTS.is_dir():
        real = sorted(SHARED_SNAPSHOTS.glob("*.pickle"), key=lambda p: p.stat().st_size)
        out += [(p.name, p.read_bytes()) for p in real[:SMALLEST_REAL]]
    return out


SOURCES = _sources()


@pytest.fixture(scope="module")
def warm() -> None:
    warm_up()


def _mutate(root: Any, draw: Any) -> None:
    """Replace one value reached by a random walk from the root (restored by the caller's
    fresh unpickle, so the source itself never changes)."""
    node = root
    for _ in range(12):
        if isinstance(node, dict) and node:
            keys = list(node)
            key = keys[draw(st.integers(0, len(keys) - 1))]
        elif isinstance(node, list) and node:
            key = draw(st.integers(0, len(node) - 1))
        else:
            return
        child = node[key]
        stop = not isinstance(child, (dict, list)) or not child or draw(st.booleans())
        if stop:
            node[key] = draw(st.sampled_from(REPLACEMENTS))
            return
        node = child


def _assert_holds(tmp_path: Path, data: bytes, command: str) -> None:
    path = tmp_path / "mutant.pickle"
    path.write_bytes(data)
    result = run(str(path), command)
    assert not check(result), (check(result), result["stderr"][-800:])


@pytest.mark.parametrize("source", [name for name, _ in SOURCES])
@SETTINGS
@given(data=st.data())
def test_structural_mutation_holds_the_line(warm, tmp_path, source, data):
    raw = dict(SOURCES)[source]
    snap = loads_plain_pickle(raw)  # a fresh copy: mutations may touch shared frames
    _mutate(snap, data.draw)
    _assert_holds(tmp_path, pickle.dumps(snap, protocol=4), "peak")


@pytest.mark.parametrize("source", [name for name, _ in SOURCES])
@SETTINGS
@given(data=st.data())
def test_byte_mutation_holds_the_line(warm, tmp_path, source, data):
    raw = bytearray(dict(SOURCES)[source])
    op = data.draw(st.sampled_from(["flip", "cut", "splice", "huge-length"]))
    at = data.draw(st.integers(2, len(raw) - 2))
    if op == "flip":
        raw[at] ^= data.draw(st.integers(1, 255))
    elif op == "cut":
        del raw[at:]
    elif op == "splice":
        length = data.draw(st.integers(1, 64))
        raw[at:at] = raw[max(0, at - length * 7) : max(0, at - length * 7) + length]
    else:  # a declared 8-byte length (BINUNICODE8/FRAME) or memo index made enormous
        raw[at : at + 1] = data.draw(
            st.sampled_from([b"\x95\xff\xff\xff\xff\xff\x00\x00\x00", b"r\xff\xff\xff\x7f"])
        )
    _assert_holds(tmp_path, bytes(raw), "summary")

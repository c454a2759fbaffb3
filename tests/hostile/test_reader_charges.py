"""The compiled reader charges the trace entries it reads by its shortcut to the scan itself
(issue 27: one pass over the bytes, not a scan beside the reader). Its charges must come to
exactly what the scan alone finds, and a limit reached inside an entry must stop the read
at the byte and with the estimate the scan alone gives (the error names both)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from memlens.snapshot.assemble.entries import KNOWN_ENTRY_FIELDS
from memlens.snapshot.native import built
from memlens.snapshot.read import prescan
from memlens.snapshot.read.compiled import NO_LIMIT
from shared_data import SHARED_SNAPSHOTS, real_snapshot_names

FAST = built()
pytestmark = pytest.mark.skipif(FAST is None, reason="compiled reader not built")
MEMO = 1 << 20


def _read(data: bytes, memory: int, memo: int = MEMO) -> tuple[str, str, int, int]:
    """The read's scan answer: the ScanStop it raised, or its scan's result."""
    assert FAST is not None
    try:
        FAST.read(
            data, KNOWN_ENTRY_FIELDS, 1 << 20, 1 << 16, NO_LIMIT, NO_LIMIT, NO_LIMIT,
            memory, memo, prescan.COSTS,
        )  # fmt: skip
    except FAST.ScanStop as exc:
        status, op, value, pos = exc.args
        return status, op, value, pos
    except (FAST.Fallback, FAST.Corrupt, FAST.Truncated, FAST.Refused, FAST.LimitHit):
        pass
    scanned: tuple[str, str, int, int] = FAST.last_scan()
    return scanned


def _scan(data: bytes, memory: int, memo: int = MEMO) -> tuple[str, str, int, int]:
    assert FAST is not None
    scanned: tuple[str, str, int, int] = FAST.scan(data, memory, memo, prescan.COSTS)
    return scanned


def _trace(n: int) -> bytes:
    """n entries as PyTorch writes them: each with its own frames list of shared frames
    (memo references the shortcut reads), and ASCII and non-ASCII strings, most with a
    pool_id pair."""
    frames = [{"filename": f"f{i}.py", "line": i, "name": "fn"} for i in range(5)]
    trace: list[dict[str, Any]] = [
        {"action": "alloc", "addr": 0x7F00_0000_0000 + 512 * i, "size": 512 + i,
         "stream": 0, "time_us": 1000 + i, "frames": frames[: 1 + i % 5],
         "compile_context": "é" if i % 7 == 0 else "N/A", "user_metadata": ""}
        for i in range(n)
    ]  # fmt: skip
    pools = [(0, 0), (1, 0), (300, 0), (70000, 2), (-1, 0)]  # BININT1, BININT2, BININT
    for i, e in enumerate(trace):
        e["frames"] = list(e["frames"])  # a new list per entry, as PyTorch pickles them
        if i % 6:  # a new tuple per entry too (the shortcut reads it); some entries lack it
            e["pool_id"] = tuple(list(pools[i % len(pools)]))
    snap = {"segments": [], "device_traces": [trace]}
    return pickle.dumps(snap, protocol=4)


def test_the_readers_charges_are_the_scans() -> None:
    data = _trace(300)
    ok = _read(data, 0)
    assert ok == _scan(data, 0) and ok[0] == "ok"


def test_a_limit_inside_an_entry_stops_where_the_scan_stops() -> None:
    data = _trace(300)
    total = _scan(data, 0)[2]
    stops = {_read(data, limit)[3] for limit in range(total // 40, total, total // 40)}
    for limit in range(total // 40, total, total // 40):
        assert _read(data, limit) == _scan(data, limit), limit
    assert len(stops) > 30  # the limits land at many different bytes
    memo = _scan(data, 0)[2]  # a memo limit too: the entries' puts name the slots
    for memo_limit in (3, 40, 200):
        assert _read(data, 0, memo_limit) == _scan(data, 0, memo_limit)
    assert memo > 0


@pytest.mark.parametrize("name", real_snapshot_names())
def test_real_snapshots_are_charged_alike(name: str) -> None:
    data = (SHARED_SNAPSHOTS / name).read_bytes()
    total = _scan(data, 0)[2]
    assert _read(data, 0) == _scan(data, 0)
    for limit in (total // 3, total - 1):
        assert _read(data, limit) == _scan(data, limit)

"""The MCP server stays responsive (issue 33): each call in its own thread, a second call
answered while a slow one runs, a cancelled or timed-out call stopped (agents/calls.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_mcp_server import call, drive, error

from memlens.agents.calls import Call

mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")


def test_a_stopped_call_stops_its_python_loop() -> None:
    count = [0]

    def spin() -> int:
        while True:  # pure Python: stopped at the next bytecode
            count[0] += 1

    c: Call[int] = Call(spin)
    c.start()
    time.sleep(0.2)
    assert c.stop() is True
    assert c.done.wait(5), "the stopped call's thread did not end"
    seen = count[0]
    time.sleep(0.2)
    assert count[0] == seen and seen > 0
    assert c.result is None and type(c.error).__name__ == "Stopped"
    assert c.stop() is False  # once


def test_a_finished_call_keeps_its_result_and_is_not_stopped() -> None:
    c: Call[int] = Call(lambda: 42)
    c.start()
    assert c.done.wait(5) and c.result == 42 and c.error is None
    assert c.stop() is False


def test_a_call_stopped_before_it_starts_never_runs() -> None:
    ran = threading.Event()
    c: Call[None] = Call(ran.set)
    c.stop()
    c.start()
    assert c.done.is_set() and not ran.is_set()


duckdb = pytest.importorskip("duckdb")
SLOW = "select sum(a.range * b.range) from range(30000) a, range(30000) b"  # ~20 s


def test_a_second_call_is_answered_while_a_slow_one_runs(hand_file: Path) -> None:
    """Before, one lock served every call: list_snapshots waited for the slow query."""

    async def body(s: Any) -> None:
        await call(s, "open_snapshot", path=str(hand_file))
        async with anyio.create_task_group() as group:
            group.start_soon(s.call_tool, "sql", {"snapshot": "s1", "query": SLOW})
            await anyio.sleep(1.0)  # the slow one is running
            started = time.monotonic()
            listing = await call(s, "list_snapshots")
            assert time.monotonic() - started < 1.0
            assert [e["snapshot"] for e in listing["snapshots"]] == ["s1"]
            group.cancel_scope.cancel()  # the client cancels the slow one

    drive(body)


def test_a_call_over_the_time_limit_is_stopped_with_one_line(hand_file: Path) -> None:
    async def body(s: Any) -> None:
        await call(s, "open_snapshot", path=str(hand_file))
        started = time.monotonic()
        line = await error(s, "sql", snapshot="s1", query=SLOW)
        assert time.monotonic() - started < 5
        assert line == (
            "memlens: error: sql: stopped after 1 s, the server's limit per call "
            "(memlens mcp --call-timeout)"
        )
        # the server goes on: the next call is answered
        assert (await call(s, "summary", snapshot="s1"))["devices"][0]["peak_active_bytes"] == 1510

    drive(body, "mcp", "--call-timeout", "1")

"""`memlens mcp` as an agent host runs it: a subprocess driven by the MCP SDK's own stdio
client. The answers are the commands' --json (hand-built snapshot, and a real one when
/work/shared is there); a hostile file is one error line and the server goes on serving."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from memlens.analysis import registry
from memlens.cli.mcp import NOT_REGISTERED
from shared_data import SHARED_SNAPSHOTS

mcp = pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

# every registered analysis is a tool, then the commands that are not analyses
TOOLS = [
    "open_snapshot",
    *registry.names(),
    *NOT_REGISTERED,
    "estimate",  # agents/predict_tools.py (simulate and plan only with --allow-run)
    "sql",
    "list_snapshots",
    "close_snapshot",
]


@asynccontextmanager
async def served(*args: str) -> AsyncIterator[Any]:
    """`memlens mcp` with `args` (`memlens`'s own options go before `mcp`: "--limit", ...)."""
    before = list(args[: args.index("mcp")]) if "mcp" in args else []
    after = list(args[args.index("mcp") + 1 :]) if "mcp" in args else list(args)
    params = mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "memlens", *before, "mcp", *after], env=dict(os.environ)
    )
    async with (
        mcp.stdio_client(params) as streams,
        mcp.ClientSession(streams[0], streams[1]) as session,
    ):
        await session.initialize()
        yield session


def drive(body: Callable[[Any], Awaitable[None]], *args: str) -> None:
    async def main() -> None:
        with anyio.fail_after(120):
            async with served(*args) as session:
                await body(session)

    anyio.run(main)


def cli_json(*args: str) -> Any:
    out = subprocess.run(
        [sys.executable, "-m", "memlens", *args, "--json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


async def call(session: Any, tool: str, **args: Any) -> Any:
    """A successful call's JSON (the structured content, which the text repeats)."""
    r = await session.call_tool(tool, args)
    assert not r.is_error, r.content[0].text
    assert json.loads(r.content[0].text) == r.structured_content
    return r.structured_content


async def error(session: Any, tool: str, **args: Any) -> str:
    r = await session.call_tool(tool, args)
    assert r.is_error and len(r.content) == 1
    return str(r.content[0].text)


def test_tools_and_answers_equal_the_commands_json(hand_file: Path) -> None:
    summary_json = cli_json("summary", str(hand_file))
    peak_json = cli_json("peak", str(hand_file))

    async def body(s: Any) -> None:
        listed = (await s.list_tools()).tools
        assert [t.name for t in listed] == TOOLS
        assert {"summary", "peak", "at", "diff", "leaks", "oom", "ranks", "fleet"} <= set(TOOLS)
        schema = next(t for t in listed if t.name == "summary").input_schema
        assert schema["required"] == ["snapshot"]
        assert schema["properties"]["top"] == {
            "type": "integer",
            "description": "How many call sites to list.",
            "default": 10,
        }
        opened = await call(s, "open_snapshot", path=str(hand_file))
        assert opened["snapshot"] == "s1"
        assert opened["devices"] == [{"device": 0, "trace_entries": 10, "allocations": 6}]
        summary = await call(s, "summary", snapshot="s1")
        assert summary == summary_json
        # docs/concepts.md's worked example: baseline C 50 + G 1000, peak after event 8
        (dev,) = summary["devices"]
        assert (dev["baseline_bytes"], dev["peak_active_bytes"], dev["peak_event_index"]) == (
            1050,
            1510,
            8,
        )
        # by path: the same open snapshot, not a second one
        assert await call(s, "peak", snapshot=str(hand_file)) == peak_json
        listing = await call(s, "list_snapshots")
        assert [e["snapshot"] for e in listing["snapshots"]] == ["s1"]
        uris = [str(r.uri) for r in (await s.list_resources()).resources]
        assert uris == [
            "memlens://docs/json-schema.md",
            "memlens://docs/concepts.md",
            "memlens://skill/SKILL.md",
        ]
        concepts = await s.read_resource("memlens://docs/concepts.md")
        assert concepts.contents[0].text.startswith("# Concepts: how memlens reads a trace")

    drive(body)


class _RunsCommand:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_hostile_file_is_one_error_line_and_the_server_goes_on(
    tmp_path: Path, hand_file: Path
) -> None:
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.pickle"
    payload = {"segments": [], "device_traces": [[_RunsCommand(str(marker))]]}
    evil.write_bytes(pickle.dumps(payload, protocol=4))
    junk = tmp_path / "junk.pickle"
    junk.write_bytes(b"\x80\x04not a pickle at all")

    async def body(s: Any) -> None:
        line = await error(s, "open_snapshot", path=str(evil))
        assert line.startswith("memlens: error: ") and "\n" not in line
        assert "nothing was executed" in line and "system" in line
        line = await error(s, "summary", snapshot=str(junk))
        assert line.startswith("memlens: error: ") and "\n" not in line
        assert await error(s, "peak", snapshot=str(hand_file), top="many") == (
            "memlens: error: top: 'many' is not a valid integer."
        )
        assert await error(s, "at", snapshot=str(hand_file)) == (
            "memlens: error: give exactly one of --event, --time-us or --addr"
        )
        # still serving, and the failures opened nothing
        summary = await call(s, "summary", snapshot=str(hand_file))
        assert summary["devices"][0]["peak_active_bytes"] == 1510
        listing = await call(s, "list_snapshots")
        assert [e["path"] for e in listing["snapshots"]] == [str(hand_file.resolve())]

    drive(body)
    assert not marker.exists()


def test_roots_limit_what_the_server_reads(tmp_path: Path, hand_file: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    inside = allowed / "in.pickle"
    inside.write_bytes(hand_file.read_bytes())

    async def body(s: Any) -> None:
        assert (await call(s, "open_snapshot", path=str(inside)))["snapshot"] == "s1"
        assert await error(s, "open_snapshot", path=str(hand_file)) == (
            f"memlens: error: {hand_file}: outside the folders this server may read ({allowed})"
        )

    drive(body, "--root", str(allowed))


def test_hostile_input_limits_hold_in_the_server(hand_file: Path) -> None:
    """`memlens --limit NAME=N mcp` sets the limits of every read the server makes."""

    async def body(s: Any) -> None:
        line = await error(s, "open_snapshot", path=str(hand_file))
        assert line.startswith(f"memlens: error: {hand_file}: stopped: more than 20 values walked")
        assert "`memlens --limit items=80`" in line

    drive(body, "--limit", "items=20", "mcp")


def test_the_memory_bound_holds_in_the_threaded_server(tmp_path: Path, hand_file: Path) -> None:
    """The server is threaded (stdio transport, a worker thread per call), where RLIMIT_AS
    cannot be used: the pre-scan's estimate still refuses a small file that would cost
    gigabytes (issue 27's bound, issue 28's promise), with the CLI's one line."""
    memo = tmp_path / "memo.pickle"
    memo.write_bytes(b"\x80\x02}r\x00\x00\x00\x10.")  # LONG_BINPUT 2^28: a 4 GB memo table
    dicts = tmp_path / "dicts.pickle"
    # 14 million one-byte empty dicts: 1.1 GB for an unpickler, past the 1 GiB for 14 MB
    head = pickle.dumps({"segments": [], "device_traces": []}, protocol=2)[:-2]
    dicts.write_bytes(head + b"\x8c\x01x(" + b"}" * 14_000_000 + b"lu.")

    async def body(s: Any) -> None:
        line = await error(s, "open_snapshot", path=str(memo))
        assert line.startswith("memlens: error: ") and "\n" not in line
        assert "a memo index of 268,435,456 at byte 3" in line
        line = await error(s, "open_snapshot", path=str(dicts))
        assert line.startswith("memlens: error: ") and "\n" not in line
        assert "1,073,741,824 bytes of memory while unpickling" in line
        summary = await call(s, "summary", snapshot=str(hand_file))
        assert summary["devices"][0]["peak_active_bytes"] == 1510

    drive(body)


REAL = "cs336_memory_ctx128_forward.pickle"
MANY_SITES = "cs336_compiled_ctx128_forward.pickle"


@pytest.mark.skipif(
    not all((SHARED_SNAPSHOTS / n).is_file() for n in (REAL, MANY_SITES)),
    reason="no shared snapshots",
)
def test_real_snapshot_peak_and_baseline_equal_summary_json() -> None:
    path = SHARED_SNAPSHOTS / REAL
    expected = cli_json("summary", str(path))
    peak_json = cli_json("peak", str(path))

    async def body(s: Any) -> None:
        opened = await call(s, "open_snapshot", path=str(path))
        summary = await call(s, "summary", snapshot=opened["snapshot"])
        assert summary == expected
        peak = await call(s, "peak", snapshot=opened["snapshot"])
        dev = next(d for d in expected["devices"] if d["device"] == opened["default_device"])
        assert (
            peak["peak_active_bytes"] == dev["peak_active_bytes"] == peak_json["peak_active_bytes"]
        )
        assert peak["event"] == dev["peak_event_index"]
        assert dev["baseline_bytes"] == summary["devices"][0]["baseline_bytes"]
        # 80 call sites at the peak of the compiled run: the answer keeps 50, and says so
        r = await s.call_tool("peak", {"snapshot": str(SHARED_SNAPSHOTS / MANY_SITES), "top": 80})
        assert not r.is_error
        assert len(r.structured_content["by_site"]) == 50
        note = r.content[-1].text
        assert note.startswith("memlens: cut: by_site: 80 entries, first 50 kept; ")
        assert note.endswith("or start the server with larger --max-items/--max-chars")

    drive(body)


def test_summary_never_imports_the_mcp_sdk(hand_file: Path) -> None:
    code = (
        "import sys; from memlens.cli.main import run; rc = run(['summary', sys.argv[1]]); "
        "print(rc, sorted(m for m in sys.modules if m == 'mcp' or m.startswith('memlens.agents')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(hand_file)], capture_output=True, text=True
    )
    assert out.stdout.splitlines()[-1] == "0 []"

"""The MCP tools in-process (no SDK): every analysis tool answers what its command's --json
prints for the same options, errors are the CLI's one line, and the session keeps,
reloads and closes snapshots as documented."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memlens.agents.bound import Bounds
from memlens.agents.dispatch import Dispatcher
from memlens.agents.session import Session
from memlens.cli.main import cli
from memlens.cli.mcp import agent_tools
from snapshot_builders import hand_snapshot


def cli_json(*args: str) -> Any:
    r = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def dispatcher(**session: Any) -> Dispatcher:
    return Dispatcher(agent_tools(), Session(**session), Bounds(items=1000, chars=10**9))


def ok(d: Dispatcher, tool: str, **args: Any) -> Any:
    reply = d.call(tool, args)
    assert not reply.error, reply.text
    assert json.loads(reply.text) == reply.data
    return reply.data


# (tool arguments, the same as command-line options)
CASES = [
    ("summary", {}, []),
    ("summary", {"top": 1, "device": 0}, ["--top", "1", "--device", "0"]),
    ("peak", {}, []),
    (
        "peak",
        {"event": 3, "depth": 1, "all_frames": True},
        ["--event", "3", "--depth", "1", "--all-frames"],
    ),
    ("at", {"event": 5}, ["--event", "5"]),
    ("at", {"time_us": 1004, "hide": [""]}, ["--time-us", "1004", "--hide", ""]),
    ("stages", {}, []),
    ("categories", {"overrides": ["mine=train"]}, ["--override", "mine=train"]),
    ("leaks", {}, []),
    ("fragmentation", {}, []),
    ("fragmentation", {"event": 4, "blocks": False}, ["--event", "4", "--no-blocks"]),
    ("oom", {}, []),
]


@pytest.mark.parametrize(("tool", "args", "options"), CASES)
def test_each_tool_answers_its_commands_json(
    hand_file: Path, tool: str, args: dict[str, Any], options: list[str]
) -> None:
    d = dispatcher()
    assert ok(d, tool, snapshot=str(hand_file), **args) == cli_json(tool, str(hand_file), *options)


def test_diff_and_fleet_take_their_inputs(hand_file: Path, tmp_path: Path) -> None:
    d = dispatcher()
    other = tmp_path / "b.pickle"
    snap = hand_snapshot()
    snap["device_traces"][0] = snap["device_traces"][0][:6]
    other.write_bytes(pickle.dumps(snap, protocol=4))
    a = ok(d, "open_snapshot", path=str(hand_file))["snapshot"]
    assert ok(d, "diff", snapshot=a, snapshot_b=str(other), top=5) == cli_json(
        "diff", str(hand_file), str(other), "--top", "5"
    )
    fleet = ok(d, "fleet", paths=[str(hand_file), str(other)], workers=1)
    expected = cli_json("fleet", str(hand_file), str(other), "--workers", "1")
    for answer in (fleet, expected):  # the worker that read each rank (host:pid) differs
        assert [row.pop("worker").split(":")[0] for row in answer["table"]] == [os.uname()[1]] * 2
    assert fleet == expected
    assert fleet["ranks_ok"] == 2


def test_errors_are_the_clis_one_line(hand_file: Path) -> None:
    d = dispatcher()
    path = str(hand_file)
    cases = [
        (
            ("nope", ()),
            "memlens: error: no tool 'nope'; the tools: open_snapshot, summary, peak, at, "
            "stages, categories, rules, diff, check, leaks, anomalies, fragmentation, oom, "
            "ranks, advise, fleet, sql, list_snapshots, close_snapshot",
        ),
        (
            ("peak", (("snapshot", path), ("bogus", 1))),
            "memlens: error: peak: unknown argument(s) "
            "bogus; it takes snapshot, event, min_share, all_frames, show_internal, depth, top, device, hide, hide_only",
        ),
        (
            ("peak", (("snapshot", path), ("top", [1, 2]))),
            "memlens: error: top: takes one value, not a list",
        ),
        (
            ("peak", ()),
            "memlens: error: give snapshot: an id from open_snapshot or the path of a snapshot",
        ),
        (("peak", (("snapshot", "s9"),)), "memlens: error: s9: no such file"),
        (
            ("at", (("snapshot", path), ("when", "later"), ("event", 1))),
            "memlens: error: when: 'later' is not one of 'alloc', 'free'.",
        ),
        (
            ("summary", (("snapshot", path), ("device", 3))),
            "memlens: error: device 3 is not in this snapshot (devices: 0)",
        ),
        (
            ("fleet", (("paths", []),)),
            "memlens: error: give paths: a list of files, directories or globs",
        ),
    ]
    for (tool, args), line in cases:
        reply = d.call(tool, dict(args))
        assert (reply.error, reply.text, reply.data) == (True, line, None)


def test_session_keeps_reloads_and_closes(hand_file: Path, tmp_path: Path) -> None:
    d = dispatcher(max_open=2)
    copy = tmp_path / "copy.pickle"
    copy.write_bytes(hand_file.read_bytes())
    assert ok(d, "open_snapshot", path=str(hand_file))["snapshot"] == "s1"
    assert ok(d, "open_snapshot", path=str(hand_file))["snapshot"] == "s1"  # the same
    assert ok(d, "open_snapshot", path=str(copy))["snapshot"] == "s2"
    # the file changes: the same id answers the new contents
    snap = hand_snapshot()
    snap["device_traces"][0] = snap["device_traces"][0][:4]
    copy.write_bytes(pickle.dumps(snap, protocol=4))
    os.utime(copy, ns=(1, 1))
    summary = ok(d, "summary", snapshot="s2")
    assert summary["devices"][0]["trace_entries"] == 4
    # a third one closes the least recently used (s1)
    third = tmp_path / "third.pickle"
    third.write_bytes(hand_file.read_bytes())
    assert ok(d, "open_snapshot", path=str(third))["snapshot"] == "s3"
    assert [e["snapshot"] for e in ok(d, "list_snapshots")["snapshots"]] == ["s2", "s3"]
    assert ok(d, "close_snapshot", snapshot=str(third)) == {"closed": True}
    assert ok(d, "close_snapshot", snapshot="s3") == {"closed": False}
    assert [e["snapshot"] for e in ok(d, "list_snapshots")["snapshots"]] == ["s2"]


def test_roots_resolve_links(hand_file: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    link = root / "link.pickle"
    link.symlink_to(hand_file)
    d = dispatcher(roots=[root])
    reply = d.call("open_snapshot", {"path": str(link)})
    assert reply.text == (
        f"memlens: error: {link}: outside the folders this server may read ({root.resolve()})"
    )
    reply = d.call("fleet", {"paths": [str(tmp_path / "*.pickle")]})
    assert reply.error and "outside the folders this server may read" in reply.text


def test_sql_reads_no_files_unless_allowed(hand_file: Path, tmp_path: Path) -> None:
    pytest.importorskip("duckdb")
    d = dispatcher()
    result = ok(d, "sql", snapshot=str(hand_file), query="select count(*) as n from events")
    assert (result["columns"], result["rows"], result["truncated"]) == (["n"], [[10]], False)
    csv = tmp_path / "x.csv"
    csv.write_text("a\n1\n")
    reply = d.call("sql", {"snapshot": str(hand_file), "query": f"select * from read_csv('{csv}')"})
    assert reply.error and reply.text.startswith("memlens: error: SQL: ")
    allowed = Dispatcher(agent_tools(allow_files=True), Session(), Bounds())
    reply = allowed.call(
        "sql", {"snapshot": str(hand_file), "query": f"select * from read_csv('{csv}')"}
    )
    assert not reply.error and reply.data["rows"] == [[1]]


def test_without_the_sdk_mcp_is_one_line() -> None:
    code = (
        "import sys; sys.modules['mcp'] = None; from memlens.cli.main import run; "
        "raise SystemExit(run(['mcp']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, stdin=subprocess.DEVNULL
    )
    assert (out.returncode, out.stdout, out.stderr) == (
        2,
        "",
        "memlens: error: memlens mcp needs the MCP SDK (mcp is missing): "
        "pip install 'memlens[mcp]'\n",
    )


def test_every_kind_of_input_the_registry_declares(hand_file: Path, tmp_path: Path) -> None:
    """ranks (one snapshot per rank), check (a second snapshot as an option), rules (a file
    argument), categories --rules: as their commands answer them, under the roots."""
    d = dispatcher()
    other = tmp_path / "b.pickle"
    snap = hand_snapshot()
    snap["device_traces"][0] = snap["device_traces"][0][:6]
    other.write_bytes(pickle.dumps(snap, protocol=4))
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"train": "train"}))
    a, b = str(hand_file), str(other)
    assert ok(d, "ranks", snapshots=[a, b]) == cli_json("ranks", a, b)
    assert ok(d, "check", snapshot=a, max_peak="1GiB", baseline=b, max_growth="100%") == cli_json(
        "check", a, "--max-peak", "1GiB", "--baseline", b, "--max-growth", "100%"
    )
    assert ok(d, "rules", snapshot=a, rules_file=str(rules)) == cli_json("rules", a, str(rules))
    assert ok(d, "categories", snapshot=a, rules_path=str(rules)) == cli_json(
        "categories", a, "--rules", str(rules)
    )
    # a file an option names is read only under the roots, as snapshots are
    root = tmp_path / "root"
    root.mkdir()
    inside = root / "a.pickle"
    inside.write_bytes(hand_file.read_bytes())
    fenced = dispatcher(roots=[root])
    outside = f"outside the folders this server may read ({root.resolve()})"
    calls: list[tuple[str, dict[str, Any]]] = [
        ("rules", {"snapshot": str(inside), "rules_file": str(rules)}),
        ("check", {"snapshot": str(inside), "baseline": b}),
        ("ranks", {"snapshots": [str(inside), b]}),
    ]
    for tool, args in calls:
        reply = fenced.call(tool, args)
        assert reply.error and reply.text.endswith(outside), reply.text

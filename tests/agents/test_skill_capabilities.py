"""`memlens capabilities --json` lists what the CLI has; the bundled skill names only
commands and options that exist (checked against that listing) and installs where each
agent host reads it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

import memlens
from memlens.agents.resources import RESOURCES, SKILL
from memlens.analysis import registry
from memlens.cli.main import COMMANDS, cli


@pytest.fixture(scope="module")
def capabilities() -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "memlens", "capabilities", "--json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


def flags(command: dict[str, Any]) -> set[str]:
    return {f for p in command["params"] for f in p["flags"]}


def test_capabilities_list_every_command_and_option(capabilities: dict[str, Any]) -> None:
    assert capabilities["memlens"] == memlens.__version__
    assert capabilities["schemas"] == {"summary": 1, "fleet": 1}
    ctx = click.Context(cli)
    assert [c["name"] for c in capabilities["commands"]] == cli.list_commands(ctx)
    assert set(COMMANDS) | set(registry.names()) == set(cli.list_commands(ctx))
    for listed in capabilities["commands"]:
        cmd = cli.get_command(ctx, listed["name"])
        assert cmd is not None
        assert [p["name"] for p in listed["params"]] == [p.name for p in cmd.params]
    peak = next(c for c in capabilities["commands"] if c["name"] == "peak")
    top = next(p for p in peak["params"] if p["name"] == "top")
    assert top == {
        "name": "top",
        "kind": "option",
        "flags": ["--top"],
        "metavar": "INTEGER",
        "type": "integer",
        "multiple": False,
        "required": False,
        "default": 15,
        "help": "How many call sites to list.",
    }
    assert peak["json"] is True
    assert {"--limit", "--debug"} <= flags({"params": capabilities["global_options"]})
    skill = next(c for c in capabilities["commands"] if c["name"] == "skill")
    assert [c["name"] for c in skill["commands"]] == ["install", "list", "show"]
    assert capabilities["mcp_tools"] == [
        "open_snapshot",
        *registry.names(),
        "fleet",
        "estimate",  # simulate and plan only with memlens mcp --allow-run
        "sql",
        "list_snapshots",
        "close_snapshot",
    ]
    assert capabilities["skill_hosts"] == ["claude", "codex", "cursor", "agents"]
    assert capabilities["features"]["mcp"] is True  # the dev environment has memlens[mcp]


def test_skill_names_only_commands_and_options_that_exist(capabilities: dict[str, Any]) -> None:
    commands = {c["name"]: c for c in capabilities["commands"]}
    global_flags = flags({"params": capabilities["global_options"]})
    text = SKILL.read_text(encoding="utf-8")
    spans = re.findall(r"`([^`\n]+(?:\n[^`\n]+)?)`", text)
    current = None
    checked = 0
    for span in spans:
        named = re.match(r"memlens (\S+)", span)
        if named:
            current = commands.get(named.group(1))
            assert current is not None, f"the skill names `memlens {named.group(1)}`"
            options = re.findall(r"(?<!\S)(--?[A-Za-z][\w-]*)", span)
        elif span.startswith("-"):
            options = [span.split()[0]]  # an option of the command named last
        else:
            continue
        # before any command is named, an option is about the commands in general
        known = flags(current) if current else set().union(*map(flags, commands.values()))
        for option in options:
            where = current["name"] if current else "no command"
            assert option in known | global_flags, f"{where} has {option}?"
            checked += 1
    assert checked >= 15  # the check ran over the workflow's options
    for api in re.findall(r"memlens\.(\w+)\(", text):
        assert hasattr(memlens, api), f"memlens.{api} does not exist"
    for tool in re.findall(r"call `(\w+)`", text):
        assert tool in capabilities["mcp_tools"]
    uris = {r.uri for r in RESOURCES}
    assert set(re.findall(r"memlens://[\w/.-]+", text)) <= uris


def test_skill_front_matter_names_it() -> None:
    front = SKILL.read_text(encoding="utf-8").split("---\n")[1]
    assert front.startswith("name: memlens\ndescription: Debug PyTorch GPU memory with memlens.")


@pytest.mark.parametrize(
    ("host", "scope", "where"),
    [
        ("claude", "user", "home/.claude/skills/memlens/SKILL.md"),
        ("claude", "project", "proj/.claude/skills/memlens/SKILL.md"),
        ("codex", "user", "home/.agents/skills/memlens/SKILL.md"),
        ("codex", "project", "proj/.agents/skills/memlens/SKILL.md"),
        ("cursor", None, "proj/.cursor/rules/memlens.mdc"),
        ("agents", None, "home/.agents/skills/memlens/SKILL.md"),
        ("agents", "project", "proj/.agents/skills/memlens/SKILL.md"),
    ],
)
def test_install_where_each_host_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, scope: str | None, where: str
) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "proj").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "proj")
    args = ["skill", "install", "--host", host] + (["--scope", scope] if scope else [])
    target = tmp_path / where
    r = CliRunner().invoke(cli, args)
    assert (r.exit_code, r.output) == (0, f"installed: {target}\n")
    text = target.read_text(encoding="utf-8")
    body = SKILL.read_text(encoding="utf-8").split("---\n", 2)[2]
    if host == "cursor":
        assert text.startswith("---\ndescription: Debug PyTorch GPU memory with memlens.")
        assert "\nglobs:\nalwaysApply: false\n---\n" in text and text.endswith(body)
    else:
        assert text == SKILL.read_text(encoding="utf-8")
    assert CliRunner().invoke(cli, args).output == f"unchanged: {target}\n"
    target.write_text("an older skill\n", encoding="utf-8")
    listed = json.loads(CliRunner().invoke(cli, ["skill", "list", "--json"]).output)["skills"]
    row = next(s for s in listed if (s["path"], s["host"]) == (str(target), host))
    assert (row["host"], row["state"]) == (host, "outdated")
    assert CliRunner().invoke(cli, args).output == f"updated: {target}\n"
    states = {
        (s["host"], s["scope"]): s["state"]
        for s in json.loads(CliRunner().invoke(cli, ["skill", "list", "--json"]).output)["skills"]
    }
    installed = [k for k, v in states.items() if v != "absent"]
    scope = scope or ("project" if host == "cursor" else "user")
    # codex reads the shared .agents locations: one file for both
    shared = [("codex", scope), ("agents", scope)] if host in ("codex", "agents") else None
    assert installed == (shared or [(host, scope)])
    assert len(states) == 7  # every host and scope but cursor's user scope


def test_cursor_has_no_user_scope(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    r = CliRunner().invoke(cli, ["skill", "install", "--host", "cursor", "--scope", "user"])
    assert r.exit_code != 0
    assert not (tmp_path / ".cursor").exists()

"""`memlens --help`: the commands in sections, each with its help line whole (click's default
is one flat list cut at 45 characters)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from memlens.cli.main import HELP_SECTIONS, cli


def test_help_groups_every_command_once_in_its_section():
    text = CliRunner().invoke(cli, ["--help"]).output
    titles = [t for t, _ in HELP_SECTIONS]
    assert titles == ["Analyze", "View", "Record & simulate", "Plan", "Agents"]
    found = re.findall(r"^([A-Z][\w &]+):$", text, re.M)
    assert found == ["Options", *titles]  # no "Commands:" flat list, no "Other"
    commands = text.split("Analyze:")[1]
    listed = re.findall(r"^  ([a-z][\w-]+) ", commands, re.M)
    ctx = cli.make_context("memlens", ["--help"], resilient_parsing=True)
    assert sorted(listed) == sorted(cli.list_commands(ctx))
    section = text.split("Analyze:")[1].split("View:")[0]
    assert "  peak " in section and "  view " not in section


def test_help_lines_are_not_cut_at_fifty_characters():
    text = CliRunner().invoke(cli, ["--help"]).output
    joined = "".join(text.split())  # the wrapping aside
    for line in (
        "What is live at the peak of active memory: by call stack (a tree with bytes at every "
        "level) and by first user frame.",
        "Explore a snapshot in the terminal: timeline, live call-stack tree, allocations.",
    ):
        assert "".join(line.split()) in joined

"""docs/agents.md's table of MCP tools is the server's list: every tool `memlens mcp`
offers (the registered analyses included, as the registry grows) is named there, and
nothing else is."""

from __future__ import annotations

import re
from pathlib import Path

from memlens.cli.mcp import agent_tools

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_tools(text: str) -> list[str]:
    """The tool names in the first column of the "### Tools" table."""
    section = text.split("### Tools", 1)[1].split("\n\n", 2)[1]
    names: list[str] = []
    for row in section.splitlines()[2:]:
        names += re.findall(r"`(\w+)`", row.split("|")[1])
    return names


def test_the_agents_page_lists_every_tool_once():
    listed = documented_tools((DOCS / "agents.md").read_text())
    tools = [t.name for t in agent_tools()]
    assert sorted(listed) == sorted(tools)
    assert len(listed) == len(set(listed))

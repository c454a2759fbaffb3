"""docs/agents.md's table of MCP tools is the server's list: the tools `memlens mcp`
offers besides the registered analyses are named there, and the analyses are one row
that points to docs/analyses.md's list (kept equal to the registry by
tests/analysis/test_registry.py), so adding an analysis edits neither this page nor this
test."""

from __future__ import annotations

import re
from pathlib import Path

from memlens.analysis import registry
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
    text = (DOCS / "agents.md").read_text()
    listed = documented_tools(text)
    tools = [t.name for t in agent_tools(allow_run=True)]  # every tool any server offers
    assert sorted(listed + registry.names()) == sorted(tools)
    assert len(listed) == len(set(listed))
    assert "| every registered analysis, one tool each:" in text

"""`memlens capabilities [--json]`: commands, options, schema versions, MCP tools and
installed features (memlens.agents.capabilities)."""

from __future__ import annotations

import click

from memlens.cli.options import emit_json, json_option, status


@click.command("capabilities")
@json_option
def command(as_json: bool) -> None:
    """What this install can do: every command and its options, the JSON schema versions,
    the MCP tools of `memlens mcp` and the optional features installed."""
    from memlens.agents.capabilities import capabilities
    from memlens.analysis.summary import SUMMARY_SCHEMA_VERSION
    from memlens.cli.main import cli
    from memlens.cli.mcp import agent_tools
    from memlens.fleet.api import FLEET_SCHEMA_VERSION

    tools = [t.name for t in agent_tools()]
    schemas = {"summary": SUMMARY_SCHEMA_VERSION, "fleet": FLEET_SCHEMA_VERSION}
    result = capabilities(cli, tools, schemas)
    if as_json:
        emit_json(result)
        return
    status(
        f"memlens {result['memlens']}  (JSON schemas: summary {schemas['summary']}, "
        f"fleet {schemas['fleet']})"
    )
    for c in result["commands"]:
        status(f"  {c['name']:<15} {c['summary']}")
    have = [k for k, v in result["features"].items() if v]
    status(f"features: {', '.join(have) or 'none'}")
    status(f"MCP tools (memlens mcp): {', '.join(tools)}")

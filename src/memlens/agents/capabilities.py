"""`memlens capabilities --json`: what this install can do, for an agent to check before it
plans: every command with its options (from the click commands themselves, so the list
cannot drift from the CLI), the JSON schema versions, the MCP tools and the optional
features that are installed."""

from __future__ import annotations

import importlib.util

import click

from memlens.agents.params import describe
from memlens.agents.results import Capabilities, CommandInfo
from memlens.agents.skill import HOSTS

# optional feature -> the modules it needs (pyproject's extras; torch is installed apart)
FEATURES = {
    "web": ("starlette", "uvicorn"),
    "tui": ("textual",),
    "sql": ("duckdb", "pyarrow"),
    "rules": ("yaml",),
    "fleet_dask": ("distributed",),
    "mcp": ("mcp",),
    "torch": ("torch",),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _command(name: str, cmd: click.Command, ctx: click.Context) -> CommandInfo:
    """One command as listed, by the name it is called by (`run` is `command` to click)."""
    params = [describe(cmd, p) for p in cmd.params if p.name != "help"]
    out: CommandInfo = {
        "name": name,
        "summary": cmd.get_short_help_str(limit=200),
        "json": any("--json" in p["flags"] for p in params),
        "params": params,
    }
    if isinstance(cmd, click.Group):
        sub = click.Context(cmd, info_name=cmd.name, parent=ctx)
        out["commands"] = [
            _command(n, c, sub) for n in cmd.list_commands(sub) if (c := cmd.get_command(sub, n))
        ]
    return out


def capabilities(root: click.Group, tools: list[str], schemas: dict[str, int]) -> Capabilities:
    """The listing: `root` is the `memlens` group, `tools` the MCP tools' names, `schemas`
    the schema version of each JSON that carries one."""
    import memlens
    from memlens.snapshot.native import native, native_replay

    ctx = click.Context(root, info_name="memlens")
    commands = [(n, root.get_command(ctx, n)) for n in root.list_commands(ctx)]
    return {
        "memlens": memlens.__version__,
        "schemas": schemas,
        "global_options": [describe(root, p) for p in root.params if p.name != "help"],
        "commands": [_command(n, c, ctx) for n, c in commands if c is not None],
        "mcp_tools": tools,
        "skill_hosts": list(HOSTS),
        "features": {
            **{name: all(map(_installed, mods)) for name, mods in FEATURES.items()},
            "compiled_reader": native() is not None,
            "compiled_replay": native_replay() is not None,
        },
    }

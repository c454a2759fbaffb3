"""`memlens mcp`: serve memlens's analyses to a coding agent over MCP (stdio).

The tools are the registered analyses (memlens.analysis.registry) and fleet (its
declaration in cli/command.py DECLARED): a tool answers what the command's --json prints;
the server itself is memlens.agents. The
MCP SDK is imported only when the server starts (memlens.agents.server; memlens[mcp]).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

import click

from memlens.cli.options import no_cache_option, whole_number_option

if TYPE_CHECKING:
    from memlens.agents.tools import Declaration, Tool

# the commands that are not registered analyses, offered as tools too
NOT_REGISTERED = ("fleet",)


@click.command("mcp")
@click.option(
    "--root",
    "roots",
    multiple=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Read only files under this folder (repeatable; default: any file a tool call names).",
)
@click.option(
    "--allow-files",
    is_flag=True,
    help="Let the sql tool's queries read and write files (off by default).",
)
@click.option(
    "--allow-run",
    is_flag=True,
    help="Offer the options that run a script (advise's script: the script is simulated, "
    "its code runs) to the agent; the script and this server's folder must be under --root. "
    "Off by default: those options are not offered and refused if passed.",
)
@no_cache_option
@whole_number_option(
    "--max-items", default=50, help="Entries kept per list of an answer (a note says what was cut)."
)
@whole_number_option(
    "--max-chars",
    least=1000,
    default=100_000,
    help="Characters of an answer; lists are cut shorter until it fits.",
)
@whole_number_option(
    "--max-open", default=4, help="Snapshots kept open at once (the least recently used is closed)."
)
@whole_number_option(
    "--max-calls", default=4, help="Tool calls run at once, each in its own thread; more wait."
)
@whole_number_option(
    "--call-timeout",
    default=600,
    help="Seconds a tool call may run; then it is stopped (an error line).",
)
def command(
    roots: tuple[Path, ...],
    allow_files: bool,
    allow_run: bool,
    no_cache: bool,
    max_items: int,
    max_chars: int,
    max_open: int,
    max_calls: int,
    call_timeout: int,
) -> None:
    """Serve memlens to a coding agent: a Model Context Protocol server on stdin/stdout
    (needs memlens[mcp]). Tools: open_snapshot, one per analysis (the JSON of its --json,
    bounded), sql, list_snapshots, close_snapshot. Setup per agent host: docs/agents.md.

    \b
    claude mcp add memlens -- memlens mcp
    """
    from memlens.agents.bound import Bounds
    from memlens.agents.dispatch import Dispatcher
    from memlens.agents.server import Limits, serve
    from memlens.agents.session import Session

    session = Session(list(roots), cache=not no_cache, max_open=max_open)
    tools = agent_tools(allow_files=allow_files, allow_run=allow_run)
    dispatcher = Dispatcher(tools, session, Bounds(items=max_items, chars=max_chars))
    serve(dispatcher, Limits(calls=max_calls, seconds=call_timeout))


def agent_tools(allow_files: bool = False, allow_run: bool = False) -> list[Tool]:
    """The MCP tools (also listed by `memlens capabilities`): every registered analysis, in
    the registry's order, then NOT_REGISTERED."""
    from memlens.agents.tools import build_tools
    from memlens.analysis import registry
    from memlens.cli.command import DECLARED

    for name in NOT_REGISTERED:  # importing a command's module declares it
        importlib.import_module(f"memlens.cli.{name}")
    others: list[Declaration] = [DECLARED[name] for name in NOT_REGISTERED]
    from memlens.agents.predict_tools import predict_tools

    return build_tools(registry.all(), others, allow_files=allow_files, allow_run=allow_run,
                       predicting=predict_tools(allow_run))  # fmt: skip

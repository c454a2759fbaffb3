"""`memlens skill install|list|show`: the bundled agent skill (memlens.agents.skill)."""

from __future__ import annotations

from collections.abc import Callable

import click

from memlens.agents.skill import HOSTS
from memlens.cli.options import F, emit_json, json_option, status


def host_option(help: str) -> Callable[[F], F]:
    return click.option(
        "--host", type=click.Choice(HOSTS), default="claude", show_default=True, help=help
    )


@click.group("skill")
def command() -> None:
    """The memlens skill for coding agents (Claude Code, Codex, Cursor, ~/.agents): when to
    use memlens, the workflow, how to read the figures, how to record. See docs/agents.md."""


@command.command("install")
@host_option("The agent host whose skill location to write.")
@click.option(
    "--scope",
    type=click.Choice(["user", "project"]),
    default=None,
    help="user: your home folder (every project); project: the current folder "
    "(commit it for the team). Default: user (cursor: project).",
)
def install(host: str, scope: str | None) -> None:
    """Write the skill where HOST reads it (replaces an older memlens skill there)."""
    from memlens.agents.skill import default_scope, install, place

    target = place(host, scope or default_scope(host))
    done = install(target)
    status(f"{done}: {target.path}")


@command.command("list")
@json_option
def list_(as_json: bool) -> None:
    """Where the skill is installed, for every host and scope."""
    from memlens.agents.skill import places

    rows = [
        {"host": p.host, "scope": p.scope, "path": str(p.path), "state": p.state()}
        for p in places()
    ]
    if as_json:
        emit_json({"skills": rows})
        return
    for r in rows:
        status(f"{r['host']:<7} {r['scope']:<8} {r['state']:<10} {r['path']}")


@command.command("show")
@host_option("Show the text as this host reads it (cursor: a .mdc rule).")
def show(host: str) -> None:
    """Print the skill's text (to paste it somewhere else)."""
    from memlens.agents.skill import skill_text

    click.echo(skill_text(host), nl=False)

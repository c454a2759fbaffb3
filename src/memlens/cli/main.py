"""The `memlens` command. Each subcommand lives in its own module and is imported only when
used, so `memlens summary` never pays for (or needs) the web server, Textual or torch."""

from __future__ import annotations

import importlib
import sys

import click

from memlens.errors import MemlensError

# command name -> module under memlens.cli that defines `command` (a click.Command)
COMMANDS: dict[str, str] = {
    "summary": "summary",
    "generate": "generate",
    "view": "view",
    "tui": "tui",
    "report": "report",
    "check": "check",
    "sql": "sql",
    "peak": "peak",
    "at": "at",
    "stages": "stages",
    "categories": "categories",
    "rules": "rules",
    "diff": "diff",
    "leaks": "leaks",
    "anomalies": "anomalies",
    "fragmentation": "fragmentation",
    "oom": "oom",
    "ranks": "ranks",
    "fleet": "fleet",
    "run": "run",
    "simulate": "simulate",
    "inspect-report": "inspect_report",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        if module is None:
            return None
        command: click.Command = importlib.import_module(f"memlens.cli.{module}").command
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memlens")
def cli() -> None:
    """memlens: see exactly where your PyTorch GPU memory goes.

    Read a CUDA memory snapshot (torch.cuda.memory._dump_snapshot) safely and fast,
    then summarize, analyze, view in a browser or terminal, or check budgets in CI.
    """


def run(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code. A MemlensError is one line on stderr and
    exit code 2; click's own usage errors keep their code (2); `ctx.exit(n)` gives n."""
    try:
        # standalone_mode=False: click returns (not raises) the code of ctx.exit(n), and
        # otherwise the command's return value (commands return None: exit 0)
        rc = cli.main(args=argv, standalone_mode=False)
    except MemlensError as exc:
        click.echo(f"memlens: error: {exc}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("memlens: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    # (a last-resort handler for unexpected exceptions belongs here, after the ones above)
    return rc if isinstance(rc, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Entry point (`memlens`, `python -m memlens`): exits with run()'s code when nonzero,
    returns on success (so tests can call it and catch SystemExit for the failures)."""
    rc = run(argv)
    if rc:
        sys.exit(rc)


if __name__ == "__main__":
    main()

"""The `memlens` command. Each subcommand lives in its own module and is imported only when
used, so `memlens summary` never pays for (or needs) the web server, Textual or torch."""

from __future__ import annotations

import importlib
import importlib.util
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
    "run": "run",
    "simulate": "simulate",
    "inspect-report": "inspect_report",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name in COMMANDS if self._find(name) is not None]

    def _find(self, name: str):
        module = COMMANDS.get(name)
        if module is None:
            return None
        spec = importlib.util.find_spec(f"memlens.cli.{module}")
        return spec

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        module = COMMANDS.get(name)
        if module is None or self._find(name) is None:
            return None
        mod = importlib.import_module(f"memlens.cli.{module}")
        return mod.command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memlens")
def cli() -> None:
    """memlens: see exactly where your PyTorch GPU memory goes.

    Read a CUDA memory snapshot (torch.cuda.memory._dump_snapshot) safely and fast,
    then summarize, analyze, view in a browser or terminal, or check budgets in CI.
    """


def main(argv: list[str] | None = None) -> None:
    """Entry point: MemlensError becomes one line on stderr and exit code 2."""
    try:
        cli.main(args=argv, standalone_mode=False)
    except MemlensError as exc:
        click.echo(f"memlens: error: {exc}", err=True)
        sys.exit(2)
    except click.exceptions.Abort:
        click.echo("memlens: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()

"""The `memlens` command. Each subcommand lives in its own module and is imported only when
used, so `memlens summary` never pays for (or needs) the web server, Textual or torch."""

from __future__ import annotations

import importlib
import os
import sys
import traceback

import click

from memlens.errors import MemlensError
from memlens.views.escape import visible

# The analyses (memlens.analysis.registry) are commands built from their declarations;
# these are the other commands: name -> module under memlens.cli that defines `command`.
COMMANDS: dict[str, str] = {
    "generate": "generate",
    "view": "view",
    "tui": "tui",
    "report": "report",
    "sql": "sql",
    "fleet": "fleet",
    "export": "export",
    "run": "run",
    "simulate": "simulate",
    "plan": "plan",
    "inspect-report": "inspect_report",
    "mcp": "mcp",
    "skill": "skill",
    "capabilities": "capabilities",
}


# Commands that run the user's own script in this process: numpy keeps its usual threads.
RUNS_USER_CODE = {"run", "simulate", "plan"}


def quick_exit_commands() -> frozenset[str]:
    """Commands that only read snapshots and print (every registered analysis): once their
    output is flushed nothing of theirs needs the interpreter's teardown (console_main).
    A command that registers atexit work or leaves threads must not be an analysis."""
    from memlens.analysis import registry

    return frozenset(registry.names())


# `memlens --help` in sections, in this order; a command named in none goes under "Other"
HELP_SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Analyze", ("summary", "peak", "at", "stages", "categories", "rules", "diff", "check",
                 "leaks", "anomalies", "fragmentation", "oom", "ranks", "fleet", "sql")),
    ("View", ("view", "tui", "report", "export", "inspect-report")),
    ("Record & simulate", ("run", "simulate", "generate")),
    ("Plan", ("plan", "advise")),
    ("Agents", ("mcp", "skill", "capabilities")),
)  # fmt: skip
HELP_LINE_LIMIT = 160  # two wrapped lines: a command's first sentence, or most of it


class LazyGroup(click.Group):
    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands in sections (HELP_SECTIONS), each with its whole first sentence
        wrapped, where click's default is one flat list cut at 45 characters."""
        names = self.list_commands(ctx)
        width = max(map(len, names))  # one column for every section
        placed = {n for _, members in HELP_SECTIONS for n in members}
        sections = [*HELP_SECTIONS, ("Other", tuple(n for n in names if n not in placed))]
        for title, members in sections:
            rows = []
            for name in members:
                cmd = self.get_command(ctx, name) if name in names else None
                if cmd is not None and not cmd.hidden:
                    help_line = cmd.get_short_help_str(limit=HELP_LINE_LIMIT)
                    rows.append((name.ljust(width), help_line))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def list_commands(self, ctx: click.Context) -> list[str]:
        from memlens.analysis import registry

        return [*registry.names(), *COMMANDS]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        from memlens.analysis import registry

        module = COMMANDS.get(name)
        if module is None and name not in registry.names():
            return None
        if name not in RUNS_USER_CODE:
            # memlens does no linear algebra, but numpy's OpenBLAS starts a thread per core
            # at import that spins for a while waiting for work: on a 2-core machine that
            # took the second core from the reader (a 1M-event summary varied 0.45-0.68 s;
            # with one thread 0.43-0.46 s). Only before numpy is imported, unless the user
            # chose a number.
            os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        if module is None:
            from memlens.cli.command import registered_command

            return registered_command(registry.get(name))
        command: click.Command = importlib.import_module(f"memlens.cli.{module}").command
        return command


def _set_limits(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> None:
    """--limit NAME=N: the same as MEMLENS_MAX_<NAME>=N (memlens.snapshot.limits), which is
    where every reader takes its limits from."""
    from memlens.snapshot.limits import RULES, env_var

    for item in values:
        name, _, raw = item.partition("=")
        name = name.strip().lower()
        if name not in RULES:
            raise click.BadParameter(f"{item!r}: NAME is one of {', '.join(RULES)}")
        try:
            value = int(float(raw))
        except (ValueError, OverflowError):
            raise click.BadParameter(f"{item!r}: N is a count (0 = no limit)") from None
        if value < 0:
            raise click.BadParameter(f"{item!r}: N is a count (0 = no limit)")
        os.environ[env_var(name)] = str(value)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memlens")
@click.option(
    "--limit",
    "limits",
    multiple=True,
    metavar="NAME=N",
    callback=_set_limits,
    expose_value=False,
    help="Raise a hostile-input limit for a file you trust: items, memo, depth, "
    "decompressed, memory (0 = none; see docs/security.md).",
)
@click.option(
    "--debug",
    is_flag=True,
    help="Show the traceback of an unexpected error instead of one line.",
)
def cli(debug: bool) -> None:
    """memlens: see exactly where your PyTorch GPU memory goes.

    Read a CUDA memory snapshot (torch.cuda.memory._dump_snapshot) safely and fast,
    then summarize, analyze, view in a browser or terminal, or check budgets in CI.
    """
    if debug:
        os.environ["MEMLENS_DEBUG"] = "1"


def run(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code. A MemlensError is one line on stderr and
    exit code 2; click's own usage errors keep their code (2); `ctx.exit(n)` gives n."""
    try:
        # standalone_mode=False: click returns (not raises) the code of ctx.exit(n), and
        # otherwise the command's return value (commands return None: exit 0)
        rc = cli.main(args=argv, standalone_mode=False)
    except MemlensError as exc:
        click.echo(f"memlens: error: {visible(str(exc))}", err=True)
        return 2
    except click.exceptions.Abort:
        click.echo("memlens: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # last resort: a file we failed to foresee, or a bug
        if os.environ.get("MEMLENS_DEBUG") == "1":
            traceback.print_exc()
        else:
            detail = visible(str(exc))[:300]
            click.echo(
                f"memlens: error: unexpected {type(exc).__name__}: {detail} "
                "(run with --debug for the traceback, and please report it)",
                err=True,
            )
        return 2
    return rc if isinstance(rc, int) else 0


def main(argv: list[str] | None = None) -> None:
    """Entry point (`memlens`, `python -m memlens`): exits with run()'s code when nonzero,
    returns on success (so tests can call it and catch SystemExit for the failures)."""
    rc = run(argv)
    if rc:
        sys.exit(rc)


if __name__ == "__main__":
    main()


def console_main() -> None:
    """The `memlens` program (and `python -m memlens`): main(), and for a command that only
    read and printed, no interpreter teardown afterwards. Freeing every module's objects one
    by one takes 20-30 ms, a tenth of a cold `summary` of a million events; tools that
    watch the process (a tracer, a profiler, coverage) get the normal exit."""
    rc = run()
    quick = quick_exit_commands()
    command = next((a for a in sys.argv[1:] if a in quick or a in COMMANDS), None)
    if command in quick and sys.gettrace() is None and sys.getprofile() is None:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # a closed or broken stream: let the normal exit report it
        else:
            os._exit(rc)
    if rc:
        sys.exit(rc)

"""One shape for every analysis command.

Every registered analysis (memlens.analysis.registry) is a command built here by
`registered_command`: its declared options become click options, and the shared ones
(the snapshot argument(s), --device, --json, --no-cache and, where the analysis takes
them, --hide and --annotations) are added around them. The command checks the options
(before any load), opens the snapshot(s), runs the analysis and prints its result: as JSON
with --json, else the text of its renderer (memlens.views.text). Nothing here computes:
`memlens NAME --json` prints exactly `registry.get(NAME).run(...)`.

The few commands that are not analyses (fleet, export) use `analysis_command`, a body that
returns an `Answer`:

    @analysis_command("export", CHROME_TRACE, opens="snapshot", hide=False)
    def command(snap: Snapshot, chrome_trace: Path | None) -> Answer[ExportResult]:
        \"\"\"Write SNAPSHOT for other tools (the command's --help).\"\"\"
        return Answer(export(snap, chrome_trace=chrome_trace), render_export)

What the body receives: first the opened input(s) (see `Opens`), then its own options by
name, and of the shared values (registry.host_options) only those its signature names:
`hide` (already the list of patterns), `device`, `no_cache`, `as_json`, `paths` (the
snapshot paths as typed). Checks that should fail before a long load go in `prepare`.

Both kinds of command go one way: the shared options are the registry's (declared once,
spelled by cli.options.click_option), the inputs are opened by the registry's `open` with
the CLI's loader (open_snapshot: warnings on stderr, --no-cache, --annotations), and the
MCP tools (memlens.agents) take the same path with theirs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import click

from memlens.analysis.registry import Analysis, Text, host_options
from memlens.analysis.spec import open_refs, refs_of
from memlens.cli.options import (
    LONGEST_TRACE,
    F,
    InputPath,
    click_option,
    emit_json,
    json_option,
    open_snapshot,
    snapshot_argument,
    snapshots_argument,
    status,
)
from memlens.snapshot.model import Snapshot
from memlens.units import bare_size_note
from memlens.views.escape import visible
from memlens.views.text.next_step import next_step

# What the body gets first:
#   "snapshot": the Snapshot (the body picks devices; it can ask for `device`)
#   "many":     [(path, Snapshot)] of SNAPSHOTS... (one file per rank)
#   "paths":    PATHS... as typed, unopened (files, directories or globs: the body, or its
#               workers, read them)
# (a command that reads one device trace, or two to compare, is a registered analysis)
Opens = Literal["snapshot", "many", "paths"]

R = TypeVar("R")


class Answer(Generic[R]):
    """What a body returns: `result` (printed by --json) and how to write it as text,
    `render(result)` (bind extra arguments with functools.partial): mypy checks that the
    renderer takes the body's result. A nonzero `exit_code` ends the command with it."""

    def __init__(self, result: R, render: Callable[[R], Text], *, exit_code: int = 0) -> None:
        self.result = result
        self.render = render
        self.exit_code = exit_code

    def text(self) -> Text:
        return self.render(self.result)


@dataclass(frozen=True)
class Declared:
    """A command made by `analysis_command` (fleet, export: not registered analyses), kept
    in DECLARED so another host (the MCP server of memlens.agents) answers with the same
    body, and so the same result, as the command's --json."""

    name: str
    command: click.Command
    opens: Opens
    body: Callable[..., Answer[Any]]
    prepare: Callable[..., dict[str, Any]] | None
    shared: tuple[str, ...]  # names of its registry.host_options
    # its options an agent is not offered: they write files or reach a network address
    not_for_agents: tuple[str, ...] = ()

    def prepared(self, own: dict[str, Any]) -> dict[str, Any]:
        """The command's own options after its `prepare` (checks before any load)."""
        return own if self.prepare is None else self.prepare(**own)

    def open(self, paths: Any, load: Callable[[str], Snapshot]) -> list[Any]:
        """The body's first argument(s) from the paths as typed, read with `load`."""
        return (
            [paths]
            if self.opens == "paths"
            else open_refs(self.name, self.opens, refs_of(self.opens, paths), load)
        )

    def run(self, given: dict[str, Any], load: Callable[[str], Snapshot]) -> Answer[Any]:
        """The Answer for the values of every option of the command (its own ones, its
        shared ones, `paths` and `as_json`), reading snapshots with the host's `load`."""
        values = {k: given.pop(k) for k in (*self.shared, "paths", "as_json")}
        values.update(self.prepared(given))
        return self.answer(self.open(values["paths"], load), values)

    def answer(self, inputs: list[Any], values: dict[str, Any]) -> Answer[Any]:
        """The body's Answer for the opened `inputs`, the command's prepared own options
        and shared values in `values` (`hide` and `hide_only` as typed; `paths`,
        `as_json`), of which the body gets its own and the shared ones its signature names."""
        from memlens.analysis.sites import hide_patterns

        given = dict(values)
        if "hide" in self.shared:  # the patterns of --hide and --hide-only
            given["hide"] = hide_patterns(given["hide"], given.pop("hide_only"))
        wanted = set(inspect.signature(self.body).parameters)
        shared = {*self.shared, "paths", "as_json"}
        return self.body(
            *inputs, **{k: v for k, v in given.items() if k not in shared or k in wanted}
        )


# command name -> its declaration, filled as the command modules are imported
DECLARED: dict[str, Declared] = {}


def analysis_command(
    name: str,
    *options: Callable[[F], F],
    opens: Opens = "snapshot",
    device_help: str = LONGEST_TRACE,
    hide: bool = True,
    annotations: bool = False,
    prepare: Callable[..., dict[str, Any]] | None = None,
    not_for_agents: tuple[str, ...] = (),
) -> Callable[[Callable[..., Answer[Any]]], click.Command]:
    """The click command `name` around a body (see the module docstring). `options` are
    the command's own click decorators, listed first in --help. `prepare(**own options)`
    runs before any snapshot is read and returns the options the body gets instead: for
    checks and parsing that should fail fast, before a long load. `not_for_agents`: its
    options the MCP tool does not offer (they write files or reach a network)."""
    shared = host_options(opens, device_help, hide, annotations)

    def decorate(body: Callable[..., Answer[Any]]) -> click.Command:
        def callback(**given: Any) -> None:
            as_json = given["as_json"]
            answer = DECLARED[name].run(given, _loader(given))
            _print(as_json, answer.result, answer.text, answer.exit_code)

        callback.__doc__ = body.__doc__
        command = _shape(name, callback, [*options, *map(click_option, shared)], opens)
        names = tuple(o.name for o in shared)
        DECLARED[name] = Declared(name, command, opens, body, prepare, names, not_for_agents)
        return command

    return decorate


def registered_command(analysis: Analysis[Any]) -> click.Command:
    """The command of a registered analysis: its options, the shared ones, and a callback
    that checks, opens, runs and prints (see the module docstring)."""

    def callback(paths: Any, as_json: bool, limit_alias: int | None = None, **given: Any) -> None:
        if limit_alias is not None:
            status("memlens: warning: --limit N is deprecated; use --top N", err=True)
            given["top"] = limit_alias
        values = analysis.request(given)  # before the load: bad options fail fast
        for o in analysis.options:
            note = bare_size_note(o.cli_flag, values[o.name]) if o.metavar == "SIZE" else None
            if note:
                status(f"memlens: warning: {note}", err=True)
        inputs = analysis.open(refs_of(analysis.opens, paths), _loader(given), values)
        result = analysis.call(inputs, dict(values))
        text = lambda: analysis.renderer(result, {**values, "paths": paths})  # noqa: E731
        hint = None if as_json else next_step(analysis.name, paths)
        _print(as_json, result, text, analysis.exit_code(result), hint)

    callback.__doc__ = analysis.doc or analysis.help
    options = [click_option(o) for o in analysis.host_options()]
    if any(o.name == "top" for o in analysis.options):
        # `limit` was the other name of "how many": scripts that used it keep working
        options.append(click.option("--limit", "limit_alias", type=int, hidden=True))
    return _shape(analysis.name, callback, options, analysis.opens)


def _loader(given: dict[str, Any]) -> Callable[[str], Snapshot]:
    """The CLI's way to read a snapshot, with the shared options given (--no-cache,
    --annotations on --device's trace)."""
    annotations = tuple(given.get("annotation_files", ()))
    no_cache, device = bool(given.get("no_cache")), given.get("device")
    return lambda path: open_snapshot(path, no_cache, annotations, device)


def _shape(
    name: str, callback: Callable[..., None], options: Sequence[Callable[[F], F]], opens: str
) -> click.Command:
    """The click command: the snapshot argument(s), then `options` in --help order, then
    --json."""
    f: Any = json_option(callback)
    for option in reversed(options):
        f = option(f)
    if opens == "pair":
        f = snapshots_argument(two=True)(f)
    elif opens == "many":
        f = click.argument(
            "paths",
            metavar="SNAPSHOTS...",
            nargs=-1,
            required=True,
            type=InputPath(),
        )(f)
    elif opens == "paths":
        # a glob or a folder: each file it names is checked as the reader opens it
        f = click.argument(
            "paths", metavar="PATHS...", nargs=-1, required=True, type=InputPath(dir_okay=True)
        )(f)
    else:
        f = snapshot_argument(f, name="paths")
    return click.command(name)(f)


def _print(
    as_json: bool, result: Any, text: Callable[[], Text], exit_code: int, hint: str | None = None
) -> None:
    """The result as JSON (--json) or as text and its dimmed "next:" hint, then the
    command's exit code."""
    if as_json:
        emit_json(result)
    else:
        _echo(text())
        if hint:
            click.echo(click.style("\n" + visible(hint), dim=True))
    if exit_code:
        click.get_current_context().exit(exit_code)


def _echo(text: Text) -> None:
    """Every analysis command's text goes out here: control characters from the snapshot's
    names are shown as escapes (`\\x1b`), never sent raw to the terminal."""
    if isinstance(text, str):
        status(text)
        return
    for line, to_stderr in text:
        status(line, err=to_stderr)

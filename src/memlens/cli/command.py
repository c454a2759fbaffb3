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
name, and of the shared values only those its signature names: `hide` (already the list
of patterns), `device`, `no_cache`, `as_json`, `paths` (the snapshot paths as typed).
Checks that should fail before a long load go in `prepare`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

import click

from memlens.analysis.registry import Analysis, Option, Text
from memlens.analysis.sites import hide_patterns
from memlens.cli.options import (
    LONGEST_TRACE,
    F,
    annotations_option,
    device_option,
    emit_json,
    hide_option,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
    snapshots_argument,
    status,
)
from memlens.keywords import field_names
from memlens.units import bare_size_note
from memlens.views.escape import visible
from memlens.views.text.next_step import next_step

if TYPE_CHECKING:
    from memlens.agents.tools import Shared

# What the body gets first:
#   "device":   the DeviceTrace of --device (default: the longest trace)
#   "snapshot": the Snapshot (the body picks devices; it can ask for `device`)
#   "pair":     two DeviceTraces, A and B (SNAPSHOT SNAPSHOT2; B's device: --device-b)
#   "many":     [(path, Snapshot)] of SNAPSHOTS... (one file per rank)
#   "paths":    PATHS... as typed, unopened (files, directories or globs: the body, or its
#               workers, read them)
Opens = Literal["device", "snapshot", "pair", "many", "paths"]

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
    # options that name a second snapshot (registry.Option kind "snapshot"): none here
    snapshot_options: tuple[str, ...] = ()

    def prepared(self, own: dict[str, Any]) -> dict[str, Any]:
        """The command's own options after its `prepare` (checks before any load)."""
        return own if self.prepare is None else self.prepare(**own)

    def answer(self, inputs: list[Any], own: dict[str, Any], shared: Shared) -> Answer[Any]:
        """The body's Answer for the opened `inputs` (see Opens: B's device is already
        chosen), its prepared `own` options and the `shared` values (`hide` as typed:
        --hide values), of which it gets those its signature names."""
        given = {**shared, "hide": hide_patterns(shared["hide"], shared["hide_only"])}
        wanted = set(inspect.signature(self.body).parameters)
        return self.body(*inputs, **own, **{k: v for k, v in given.items() if k in wanted})


# command name -> its declaration, filled as the command modules are imported
DECLARED: dict[str, Declared] = {}


def analysis_command(
    name: str,
    *options: Callable[[F], F],
    opens: Opens = "device",
    device_help: str = LONGEST_TRACE,
    hide: bool = True,
    annotations: bool = False,
    prepare: Callable[..., dict[str, Any]] | None = None,
) -> Callable[[Callable[..., Answer[Any]]], click.Command]:
    """The click command `name` around a body (see the module docstring). `options` are
    the command's own click decorators, listed first in --help. `prepare(**own options)`
    runs before any snapshot is read and returns the options the body gets instead: for
    checks and parsing that should fail fast, before a long load."""

    def decorate(body: Callable[..., Answer[Any]]) -> click.Command:
        def callback(**given: Any) -> None:
            common, own = _Common.split(given)
            declared = DECLARED[name]
            own = declared.prepared(own)
            inputs = common.open(opens)
            shared: Shared = {
                "hide": common.hide,
                "hide_only": common.hide_only,
                "device": common.device,
                "device_b": common.device_b,
                "no_cache": common.no_cache,
                "as_json": common.as_json,
                "paths": common.paths,
            }
            answer = declared.answer(inputs, own, shared)
            _print(common.as_json, answer.result, answer.text, answer.exit_code)

        callback.__doc__ = body.__doc__
        command = _shape(name, callback, options, opens, device_help, hide, annotations)
        DECLARED[name] = Declared(name, command, opens, body, prepare)
        return command

    return decorate


def registered_command(analysis: Analysis[Any]) -> click.Command:
    """The command of a registered analysis: its options, the shared ones, and a callback
    that checks, opens, runs and prints (see the module docstring)."""

    def callback(limit_alias: int | None = None, **given: Any) -> None:
        common, own = _Common.split(given)
        if limit_alias is not None:
            status("memlens: warning: --limit N is deprecated; use --top N", err=True)
            own["top"] = limit_alias
        own["device"] = common.device
        if analysis.opens == "pair":
            own["device_b"] = common.device_b
        if analysis.hide:
            own["hide_patterns"] = hide_patterns(common.hide, common.hide_only)
        values = analysis.check(own)  # before the load: bad options fail fast
        for o in analysis.options:
            note = bare_size_note(o.cli_flag, values[o.name]) if o.metavar == "SIZE" else None
            if note:
                status(f"memlens: warning: {note}", err=True)
        inputs = common.open(analysis.opens)
        for o in analysis.options:
            if o.kind == "snapshot" and values[o.name] is not None:
                values[o.name] = open_snapshot(values[o.name], common.no_cache)
        result = analysis.call(inputs, dict(values))
        text = lambda: analysis.renderer(result, {**values, "paths": common.paths})  # noqa: E731
        hint = None if common.as_json else next_step(analysis.name, common.paths)
        _print(common.as_json, result, text, analysis.exit_code(result), hint)

    callback.__doc__ = analysis.doc or analysis.help
    options = [click_option(o) for o in analysis.options]
    if any(o.name == "top" for o in analysis.options):
        # `limit` was the other name of "how many": scripts that used it keep working
        options.append(click.option("--limit", "limit_alias", type=int, hidden=True))
    return _shape(
        analysis.name,
        callback,
        options,
        analysis.opens,
        analysis.device_help,
        analysis.hide,
        analysis.annotations,
    )


def click_option(o: Option) -> Callable[[F], F]:
    """A declared option as click spells it (registry.Option)."""
    path = click.Path(dir_okay=False)
    if o.kind == "argument":
        return click.argument(o.name, type=path if o.path else o.type)
    if o.type is bool:
        spelling = f"{o.cli_flag}/{o.secondary}" if o.secondary else o.cli_flag
        return click.option(
            spelling,
            o.name,
            is_flag=True,
            default=o.default,
            show_default=o.show_default,
            help=o.help,
        )
    kind: Any = o.type
    if o.path or o.kind == "snapshot":
        kind = path
    elif o.choices:
        kind = click.Choice(o.choices)
    decls = [o.cli_flag, *([o.short] if o.short else []), o.name]
    return click.option(
        *decls,
        type=kind,
        default=o.default,
        show_default=o.show_default,
        multiple=o.multiple,
        metavar=o.metavar,
        help=o.help,
    )


def _shape(
    name: str,
    callback: Callable[..., None],
    options: Sequence[Callable[[F], F]],
    opens: Opens,
    device_help: str,
    hide: bool,
    annotations: bool,
) -> click.Command:
    """The click command: `options` first in --help, then the shared ones."""
    f: Any = callback
    if hide:
        f = hide_option(f)
    if annotations:
        f = annotations_option(f)
    f = json_option(no_cache_option(f))
    if opens == "pair":
        f = click.option(
            "--device-b", type=int, default=None, help="Device of B when it differs from --device."
        )(f)
    f = device_option(help=device_help)(f)
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
            type=click.Path(dir_okay=False),
        )(f)
    elif opens == "paths":
        f = click.argument("paths", metavar="PATHS...", nargs=-1, required=True)(f)
    else:
        f = snapshot_argument(f, name="paths")
    return click.command(name)(f)


@dataclass(frozen=True)
class _Common:
    """The options every command shares, as click passes them (by these names)."""

    paths: Any
    as_json: bool
    no_cache: bool
    device: int | None = None
    device_b: int | None = None
    hide: tuple[str, ...] = ()
    hide_only: tuple[str, ...] = ()
    annotation_files: tuple[str, ...] = ()

    @classmethod
    def split(cls, given: dict[str, Any]) -> tuple[_Common, dict[str, Any]]:
        """(the shared options, the command's own ones)."""
        names = field_names(cls)
        own = {k: v for k, v in given.items() if k not in names}
        return cls(**{k: v for k, v in given.items() if k in names}), own

    def open(self, opens: Opens) -> list[Any]:
        return _open(
            opens, self.paths, self.no_cache, self.annotation_files, self.device, self.device_b
        )


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


def _open(
    opens: Opens,
    paths: Any,
    no_cache: bool,
    annotation_files: tuple[str, ...],
    device: int | None,
    device_b: int | None,
) -> list[Any]:
    if opens == "paths":
        return [paths]
    if opens == "many":
        return [[(p, open_snapshot(p, no_cache)) for p in paths]]
    if opens == "pair":
        a = open_snapshot(paths[0], no_cache).device(device)
        b = open_snapshot(paths[1], no_cache).device(device_b if device_b is not None else device)
        return [a, b]
    snap = open_snapshot(paths, no_cache, annotation_files, device)
    return [snap.device(device) if opens == "device" else snap]


def _echo(text: Text) -> None:
    """Every analysis command's text goes out here: control characters from the snapshot's
    names are shown as escapes (`\\x1b`), never sent raw to the terminal."""
    if isinstance(text, str):
        status(text)
        return
    for line, to_stderr in text:
        status(line, err=to_stderr)

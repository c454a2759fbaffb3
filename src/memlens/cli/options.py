"""Options shared by the subcommands, so every command spells them the same way: the
shared ones are declared once as `Option`s (memlens.analysis.registry: DEVICE, HIDE, ...)
and spelled for click by `click_option`, as every registered analysis's own options are."""

from __future__ import annotations

import contextlib
import json
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import click

from memlens.analysis.jsonable import json_default
from memlens.analysis.registry import (
    ANNOTATIONS,
    DEVICE,
    HIDE,
    HIDE_ONLY,
    JSON,
    NO_CACHE,
    Option,
)
from memlens.snapshot.model import Snapshot
from memlens.views.escape import visible, visible_output

F = Callable[..., Any]


class InputPath(click.Path):
    """A file a command reads: snapshot.input_path's checks (no NUL, not overlong, a regular
    file: not /proc/self/mem, a device or a pipe), each one `memlens: error:` line, then
    click's Path."""

    def __init__(self, *, dir_okay: bool = False, exists: bool = False) -> None:
        super().__init__(dir_okay=dir_okay, exists=exists)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from memlens.snapshot.input_path import check_input

        if isinstance(value, str):
            check_input(value, dir_okay=self.dir_okay)
        return super().convert(value, param, ctx)


class FiniteFloat(click.types.FloatParamType):
    """A float option: NaN and infinities are usage errors, not values that reach the
    arithmetic (a NaN threshold compares false with everything)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        from memlens.errors import MemlensError

        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            flag = param.opts[0] if param is not None and param.opts else "a number"
            raise MemlensError(f"{flag}: {value!r} is not a finite number")
        return number


FINITE = FiniteFloat()


def snapshot_argument(f: F, name: str = "snapshot") -> F:
    return click.argument(name, metavar="SNAPSHOT", type=InputPath())(f)


def snapshots_argument(two: bool = False) -> Callable[[F], F]:
    """`SNAPSHOT [SNAPSHOT2]`, or `SNAPSHOT SNAPSHOT2` when `two`: the one shape of the
    commands that compare two snapshots (view, tui, report, diff). The parameter is
    `paths`: (SNAPSHOT, SNAPSHOT2 or None)."""

    def check(
        ctx: click.Context, _: click.Parameter, paths: tuple[str, ...]
    ) -> tuple[str, str | None]:
        from memlens.errors import MemlensError

        if len(paths) > 2 or (two and len(paths) < 2):
            wanted = "two snapshots, A and B" if two else "one snapshot, or two to compare"
            raise MemlensError(f"{ctx.info_name} takes {wanted}")
        return (paths[0], paths[1] if len(paths) > 1 else None)

    metavar = "SNAPSHOT SNAPSHOT2" if two else "SNAPSHOT [SNAPSHOT2]"
    return click.argument(
        "paths",
        metavar=metavar,
        nargs=-1,
        required=True,
        type=InputPath(),
        callback=check,
    )


LONGEST_TRACE = DEVICE.help  # "...(default: the device with the longest trace)."


def click_option(o: Option) -> Callable[[F], F]:
    """A declared option as click spells it (registry.Option)."""
    path = InputPath()
    if o.kind == "argument":
        return click.argument(o.name, type=path if o.path else o.type)
    if o.type is bool:
        spelling = f"{o.cli_flag}/{o.secondary}" if o.secondary else o.cli_flag
        return click.option(
            spelling, o.name, is_flag=True, default=o.default, show_default=o.show_default,
            help=o.help,
        )  # fmt: skip
    kind: Any = FINITE if o.type is float else o.type
    if o.existing:
        kind = InputPath(dir_okay=True, exists=True)
    elif o.path or o.kind == "snapshot":
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


@overload
def device_option(f: F, *, help: str = LONGEST_TRACE) -> F: ...
@overload
def device_option(f: None = None, *, help: str = LONGEST_TRACE) -> Callable[[F], F]: ...
def device_option(f: F | None = None, *, help: str = LONGEST_TRACE) -> F | Callable[[F], F]:
    """--device/-d; `help` says what the command does without it. `@device_option` or
    `@device_option(help=...)`."""
    option = click_option(Option(**{**DEVICE.__dict__, "help": help}))
    return option(f) if f is not None else option


def whole_number_option(
    *names: str, help: str, least: int = 1, default: int | None = None
) -> Callable[[F], F]:
    """A whole-number option >= `least` (`names`: its flags, then its parameter name where
    that differs): with a `default`, shown in the help; without one, None when not given."""
    return click.option(
        *names,
        type=click.IntRange(min=least),
        default=default,
        show_default=default is not None,
        help=help,
    )


def value_option(*names: str, metavar: str, help: str) -> Callable[[F], F]:
    """An option that takes one text value (`names`: its flags, then its parameter name
    where that differs), None when not given: the command's own code supplies the
    default, and the help says what it is."""
    return click.option(*names, metavar=metavar, default=None, help=help)


def json_option(f: F) -> F:
    return click_option(JSON)(f)


def no_cache_option(f: F) -> F:
    return click_option(NO_CACHE)(f)


def script_command(output_help: str, *, dir_okay: bool = False) -> Callable[[F], click.Command]:
    """`run` and `simulate`: SCRIPT [ARGS]... runs as __main__ (everything after SCRIPT is
    the script's own, options included) and -o/--output names the snapshot to write
    (`dir_okay`: or a directory, simulate's of one file per rank)."""

    def decorate(f: F) -> click.Command:
        f = click.argument("args", nargs=-1, type=click.UNPROCESSED)(f)
        f = click.argument("script", type=click.Path(dir_okay=False))(f)
        output_type = click.Path(dir_okay=dir_okay, path_type=Path)
        f = click.option("--output", "-o", type=output_type, help=output_help)(f)
        settings = {"ignore_unknown_options": True, "allow_interspersed_args": False}
        return click.command(context_settings=settings)(f)

    return decorate


def script_name(script: str) -> str:
    """What a simulated script's output is named after: a file's stem (train.py ->
    train), or a module's last part (-m pkg.train -> train)."""
    return Path(script).stem if script.endswith(".py") else script.rpartition(".")[2]


def hide_option(f: F) -> F:
    """--hide (added to the default patterns) and --hide-only (replacing them)."""
    return click_option(HIDE)(click_option(HIDE_ONLY)(f))


def annotations_option(f: F) -> F:
    return click_option(ANNOTATIONS)(f)


def write_page(path: str, text: str) -> None:
    """Write an HTML page (`fleet --report`, `plan --html`); failing, one line."""
    from memlens.errors import MemlensError

    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise MemlensError(f"cannot write {path}: {exc.strerror or exc}") from None


def status(message: str, *, err: bool = False) -> None:
    """A status line ("wrote X", "serving X", a summary on stderr): it names files and may
    quote a snapshot's names, so control characters are shown as escapes (`\\x1b`) as in
    every analysis's text (cli/command.py's _echo), never sent raw to the terminal."""
    click.echo(visible_output(message), err=err)


def opening_options(device_help: str = LONGEST_TRACE) -> Callable[[F], F]:
    """--device, --no-cache and --annotations: what open_snapshots takes."""

    def apply(f: F) -> F:
        return device_option(help=device_help)(no_cache_option(annotations_option(f)))

    return apply


def open_snapshots(
    paths: Sequence[str | None],
    no_cache: bool,
    annotation_files: tuple[str, ...],
    device: int | None,
    cache_writes: list[Callable[[], None]] | None = None,
) -> list[tuple[str, Snapshot]]:
    """The snapshots given (a second one may be absent), each with its path, opened by
    open_snapshot; --annotations belong to the first (the run they were recorded with).
    With `cache_writes`, see open_snapshot."""
    given = [p for p in paths if p is not None]
    return [
        (p, open_snapshot(p, no_cache, annotation_files if i == 0 else (), device, cache_writes))
        for i, p in enumerate(given)
    ]


def open_snapshot(
    path: str,
    no_cache: bool = False,
    annotation_files: tuple[str, ...] = (),
    device: int | None = None,
    cache_writes: list[Callable[[], None]] | None = None,
) -> Snapshot:
    """Load for the CLI: snapshot warnings go to stderr, once each, without Python's noise.
    `annotation_files` (see annotations_option) are added to the snapshot's annotations,
    on `device` (default: the longest trace, the one shown by default). With
    `cache_writes`, a cold load's column cache is not written now: its writer is appended
    there for the caller to run later (memlens view, in the background)."""
    from memlens.snapshot.loader import load_then_cache

    with _snapshot_warnings_to_stderr():
        snap, write_cache = load_then_cache(path, cache=not no_cache)
        if cache_writes is None:
            write_cache()
    if cache_writes is not None:
        cache_writes.append(lambda: _with_snapshot_warnings(write_cache))
    if annotation_files:
        from memlens.inspector.annotations import annotations_from

        if device is None:
            device = snap.device().device if snap.traces else 0
        for extra in annotation_files:
            snap.add_annotations(annotations_from(extra, device))
    return snap


def _with_snapshot_warnings(run: Callable[[], None]) -> None:
    with _snapshot_warnings_to_stderr():
        run()


@contextlib.contextmanager
def _snapshot_warnings_to_stderr() -> Iterator[None]:
    """Snapshot warnings as `memlens: warning: ...` lines; anyone else's (numpy's, a
    deprecation) back to the filters they escaped."""
    from memlens.snapshot.loader import SnapshotWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SnapshotWarning)
        yield
    for w in caught:
        if issubclass(w.category, SnapshotWarning):
            click.echo(f"memlens: warning: {visible(str(w.message))}", err=True)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def require_extra(command: str, what: str, modules: tuple[str, ...], extra: str) -> None:
    """Fail with the extra to install when a command's optional packages are missing (a
    core install), before any snapshot is read, instead of an unexpected import error."""
    from importlib.util import find_spec

    from memlens.errors import MemlensError

    missing = [m for m in modules if find_spec(m) is None]
    if missing:
        raise MemlensError(
            f"memlens {command} needs {what} ({', '.join(missing)} is not installed): "
            f"pip install 'memlens[{extra}]'"
        )


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=json_default)
    sys.stdout.write("\n")

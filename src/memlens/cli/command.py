"""One shape for every analysis command.

`analysis_command` declares what the analysis commands share: the snapshot argument(s),
--device, --json, --no-cache and, where the command uses them, --hide and --annotations.
It opens the snapshot(s), calls the command's body with them and the command's own
options, and prints the body's `Answer`: its result as JSON with --json, else the text
of its renderer (from memlens.views.text). A command module is its options and a body
that makes one call:

    @analysis_command("leaks", top_option(10), annotations=True)
    def command(dev: DeviceTrace, top: int, hide: list[str] | None) -> Answer:
        \"\"\"Leaks and growth (the command's --help).\"\"\"
        return Answer(leaks(dev, limit=top, hide_patterns=hide), render_leaks, dev.device)

What the body receives: first the opened input(s) (see `Opens`), then its own options by
name, and of the shared values only those its signature names: `hide` (already the list
of patterns), `device`, `no_cache`, `as_json`, `paths` (the snapshot paths as typed).
Checks that should fail before a long load go in `prepare`. A new command also needs its
name in cli/main.py COMMANDS (loaded lazily) and, with --json, its TypedDict in
analysis/results.py and its section in docs/json-schema.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

import click

from memlens.cli.options import (
    LONGEST_TRACE,
    F,
    annotations_option,
    device_option,
    emit_json,
    hide_option,
    hide_patterns,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
    snapshots_argument,
    status,
)

# What the body gets first:
#   "device":   the DeviceTrace of --device (default: the longest trace)
#   "snapshot": the Snapshot (the body picks devices; it can ask for `device`)
#   "pair":     two DeviceTraces, A and B (SNAPSHOT SNAPSHOT2; B's device: --device-b)
#   "many":     [(path, Snapshot)] of SNAPSHOTS... (one file per rank)
#   "paths":    PATHS... as typed, unopened (files, directories or globs: the body, or its
#               workers, read them)
Opens = Literal["device", "snapshot", "pair", "many", "paths"]

# a renderer returns the text for stdout, or (line, to_stderr) pairs (a failed budget
# goes to stderr so CI logs show it)
Text = str | list[tuple[str, bool]]


class Answer:
    """What a body returns: `result` (printed by --json) and how to write it as text:
    `render(result, *args)`. A nonzero `exit_code` ends the command with it (either way)."""

    def __init__(
        self,
        result: Any,
        render: Callable[..., Text],
        *args: Any,
        exit_code: int = 0,
    ) -> None:
        self.result = result
        self.render = render
        self.args = args
        self.exit_code = exit_code

    def text(self) -> Text:
        return self.render(self.result, *self.args)


def analysis_command(
    name: str,
    *options: Callable[[F], F],
    opens: Opens = "device",
    device_help: str = LONGEST_TRACE,
    hide: bool = True,
    annotations: bool = False,
    prepare: Callable[..., dict[str, Any]] | None = None,
) -> Callable[[Callable[..., Answer]], click.Command]:
    """The click command `name` around a body (see the module docstring). `options` are
    the command's own click decorators, listed first in --help. `prepare(**own options)`
    runs before any snapshot is read and returns the options the body gets instead: for
    checks and parsing that should fail fast, before a long load."""

    def decorate(body: Callable[..., Answer]) -> click.Command:
        wanted = set(inspect.signature(body).parameters)

        def callback(
            paths: Any,
            as_json: bool,
            no_cache: bool,
            device: int | None = None,
            device_b: int | None = None,
            hide: tuple[str, ...] = (),
            annotation_files: tuple[str, ...] = (),
            **own: Any,
        ) -> None:
            if prepare is not None:
                own = prepare(**own)
            inputs = _open(opens, paths, no_cache, annotation_files, device, device_b)
            shared = {
                "hide": hide_patterns(hide),
                "device": device,
                "no_cache": no_cache,
                "as_json": as_json,
                "paths": paths,
            }
            own.update({k: v for k, v in shared.items() if k in wanted})
            answer = body(*inputs, **own)
            if as_json:
                emit_json(answer.result)
            else:
                _echo(answer.text())
            if answer.exit_code:
                click.get_current_context().exit(answer.exit_code)

        callback.__doc__ = body.__doc__
        f: Any = callback
        if hide:
            f = hide_option(f)
        if annotations:
            f = annotations_option(f)
        f = json_option(no_cache_option(f))
        if opens == "pair":
            f = click.option(
                "--device-b", type=int, default=None, help="Device of B when it differs from --device."
            )(f)  # fmt: skip
        f = device_option(help=device_help)(f)
        for option in reversed(options):
            f = option(f)
        if opens == "pair":
            f = snapshots_argument(two=True)(f)
        elif opens == "many":
            f = click.argument("paths", metavar="SNAPSHOTS...", nargs=-1, required=True,
                               type=click.Path(dir_okay=False))(f)  # fmt: skip
        elif opens == "paths":
            f = click.argument("paths", metavar="PATHS...", nargs=-1, required=True)(f)
        else:
            f = snapshot_argument(f, name="paths")
        return click.command(name)(f)

    return decorate


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

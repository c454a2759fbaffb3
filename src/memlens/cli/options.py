"""Options shared by the subcommands, so every command spells them the same way."""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable
from typing import Any

import click

from memlens.analysis.jsonable import json_default
from memlens.snapshot.model import Snapshot

F = Callable[..., Any]


def snapshot_argument(f: F) -> F:
    return click.argument("snapshot", type=click.Path(dir_okay=False))(f)


def device_option(f: F) -> F:
    return click.option(
        "--device", "-d", type=int, default=None,
        help="Device ordinal (default: every device; for single-device views, the longest trace).",
    )(f)  # fmt: skip


def event_option(f: F) -> F:
    """--event for the commands that answer "at the peak" by default."""
    return click.option(
        "--event", "-e", type=int, default=None,
        help="At this event instead of the peak (-1: before the first).",
    )(f)  # fmt: skip


def points_option(default: int) -> Callable[[F], F]:
    """--points: how many sampled events a curve over time keeps (exact at each)."""
    return click.option(
        "--points", type=int, default=default, show_default=True,
        help="Sampled events of the curves over time (--json).",
    )  # fmt: skip


def json_option(f: F) -> F:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON object (schema: docs/json-schema.md).",
    )(f)


def no_cache_option(f: F) -> F:
    return click.option(
        "--no-cache",
        is_flag=True,
        help="Do not read or write the column cache (MEMLENS_CACHE_DIR).",
    )(f)


def hide_option(f: F) -> F:
    return click.option(
        "--hide", multiple=True, metavar="REGEX",
        help="Filename pattern to skip when naming the call site (repeatable). "
        "Replaces the default (torch internals, stdlib). --hide '' shows every frame.",
    )(f)  # fmt: skip


def hide_patterns(hide: tuple[str, ...]) -> list[str] | None:
    """None keeps the defaults; --hide '' alone means hide nothing."""
    if not hide:
        return None
    return [h for h in hide if h]


def annotations_option(f: F) -> F:
    return click.option(
        "--annotations", "annotation_files", multiple=True, metavar="PATH",
        type=click.Path(exists=True),
        help="Add stages from PATH (repeatable): a `memlens.inspect` run directory (each "
        "sampled forward pass, with its activation bytes) or a JSON list of "
        '{"name", "stage": "START"|"END", "time_us"} entries.',
    )(f)  # fmt: skip


def open_snapshot(
    path: str,
    no_cache: bool = False,
    annotation_files: tuple[str, ...] = (),
    device: int | None = None,
) -> Snapshot:
    """Load for the CLI: snapshot warnings go to stderr, once each, without Python's noise.
    `annotation_files` (see annotations_option) are added to the snapshot's annotations,
    on `device` (default: the longest trace, the one shown by default)."""
    from memlens.snapshot.loader import SnapshotWarning, load

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SnapshotWarning)
        snap = load(path, cache=not no_cache)
    for w in caught:
        if issubclass(w.category, SnapshotWarning):
            click.echo(f"memlens: warning: {w.message}", err=True)
    if annotation_files:
        from memlens.inspect.annotations import annotations_from

        if device is None:
            device = snap.device().device if snap.traces else 0
        for extra in annotation_files:
            snap.add_annotations(annotations_from(extra, device))
    return snap


def emit_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=json_default)
    sys.stdout.write("\n")

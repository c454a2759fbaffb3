"""`memlens summary SNAP`: headline figures and the top call sites at the peak."""

from __future__ import annotations

import click

from memlens.cli.options import (
    device_option,
    emit_json,
    hide_option,
    hide_patterns,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
)


@click.command("summary")
@snapshot_argument
@device_option
@json_option
@no_cache_option
@hide_option
@click.option("--top", type=int, default=10, show_default=True, help="How many call sites to list.")
def command(
    snapshot: str,
    device: int | None,
    as_json: bool,
    no_cache: bool,
    hide: tuple[str, ...],
    top: int,
) -> None:
    """Devices, time span, baseline, peak (active and reserved), end state and top sites."""
    from memlens.views.text.summary import render_summary, summarize

    snap = open_snapshot(snapshot, no_cache)
    result = summarize(snap, device, top=top, hide_patterns=hide_patterns(hide))
    if as_json:
        emit_json(result)
    else:
        click.echo(render_summary(snap, result))

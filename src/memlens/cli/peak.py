"""`memlens peak SNAP [--event N]`: what is live at the peak (or after event N)."""

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


def tree_options(f):
    f = click.option("--top", type=int, default=15, show_default=True,
                     help="How many call sites to list.")(f)  # fmt: skip
    f = click.option("--depth", type=int, default=None,
                     help="Limit the call-stack tree to this many levels.")(f)  # fmt: skip
    f = click.option("--all-frames", is_flag=True,
                     help="Keep C++ frames in the tree (default: Python frames only).")(f)  # fmt: skip
    f = click.option("--min-share", type=float, default=0.005, show_default=True,
                     help="Merge tree nodes under this share of the total into <other>.")(f)  # fmt: skip
    return f


def live_kwargs(top: int, depth: int | None, all_frames: bool, min_share: float, hide) -> dict:
    return {
        "top": top,
        "tree_depth": depth,
        "python_only": not all_frames,
        "tree_min_share": min_share,
        "hide_patterns": hide_patterns(hide),
    }


@click.command("peak")
@snapshot_argument
@click.option("--event", "-e", type=int, default=None,
              help="Show the live set after this event instead of the peak (-1: before the first).")  # fmt: skip
@device_option
@tree_options
@json_option
@no_cache_option
@hide_option
def command(snapshot: str, event: int | None, device: int | None, top: int, depth: int | None,
            all_frames: bool, min_share: float, as_json: bool, no_cache: bool,
            hide: tuple[str, ...]) -> None:  # fmt: skip
    """What is live at the peak of active memory: by call stack (a tree with bytes at
    every level) and by first user frame."""
    from memlens.analysis.peak import live_set, peak
    from memlens.analysis.text import live_set_lines

    dev = open_snapshot(snapshot, no_cache).device(device)
    kw = live_kwargs(top, depth, all_frames, min_share, hide)
    result = peak(dev, **kw) if event is None else live_set(dev, event, **kw)
    if as_json:
        emit_json(result)
        return
    title = f"device {dev.device} " + ("peak" if event is None else "live set")
    click.echo("\n".join(live_set_lines(result, title)))

"""`memlens at SNAP --event N | --time-us T | --addr 0x.. [--version V] [--when alloc|free]`:
memory at a point of the trace, or at an allocation."""

from __future__ import annotations

import click

from memlens.cli.options import (
    device_option,
    emit_json,
    hide_option,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
)
from memlens.cli.peak import live_kwargs, tree_options


@click.command("at")
@snapshot_argument
@click.option(
    "--event", "-e", type=int, default=None, help="After this event (-1: before the first)."
)
@click.option(
    "--time-us", type=int, default=None, help="After the last event at or before this time (µs)."
)
@click.option(
    "--addr", default=None, help="An allocation's address: 0x7f3a00 or 0x7f3a00_V (V = version)."
)
@click.option("--version", "version", type=int, default=None,
              help="Which allocation at --addr (0 = first at that address).")  # fmt: skip
@click.option("--when", type=click.Choice(["alloc", "free"]), default="alloc", show_default=True,
              help="Right after the allocation, or right after its free.")  # fmt: skip
@device_option
@tree_options
@json_option
@no_cache_option
@hide_option
def command(snapshot: str, event: int | None, time_us: int | None, addr: str | None,
            version: int | None, when: str, device: int | None, top: int, depth: int | None,
            all_frames: bool, min_share: float, as_json: bool, no_cache: bool,
            hide: tuple[str, ...]) -> None:  # fmt: skip
    """Total memory and what is live at an event, a time, or an allocation (or its free)."""
    from memlens.analysis.peak import live_set, memory_at_allocation, parse_address, resolve_event
    from memlens.analysis.text import live_set_lines
    from memlens.errors import MemlensError

    if sum(x is not None for x in (event, time_us, addr)) != 1:
        raise MemlensError("give exactly one of --event, --time-us or --addr")
    dev = open_snapshot(snapshot, no_cache).device(device)
    kw = live_kwargs(top, depth, all_frames, min_share, hide)
    if addr is not None:
        a, v = parse_address(addr)
        result = memory_at_allocation(dev, a, version if version is not None else v, when, **kw)
        title = f"device {dev.device} at {when} of {result['allocation']['address']}_{result['allocation']['version']} ({result['allocation']['bytes']:,} bytes)"
    else:
        ev = resolve_event(dev, event=event, time_us=time_us)
        result = live_set(dev, ev, **kw)
        title = f"device {dev.device}"
    if as_json:
        emit_json(result)
    else:
        click.echo("\n".join(live_set_lines(result, title)))

"""`memlens at SNAP --event N | --time-us T | --addr 0x.. [--version V] [--when alloc|free]`:
memory at a point of the trace, or at an allocation."""

from __future__ import annotations

from typing import Any

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import event_option, live_kwargs, tree_options
from memlens.snapshot.model import DeviceTrace


def _one_point(**options: Any) -> dict[str, Any]:
    from memlens.errors import MemlensError

    if sum(options[k] is not None for k in ("event", "time_us", "addr")) != 1:
        raise MemlensError("give exactly one of --event, --time-us or --addr")
    return options


@analysis_command(
    "at",
    event_option(help="After this event (-1: before the first)."),
    click.option("--time-us", type=int, default=None,
                 help="After the last event at or before this time (µs)."),
    click.option("--addr", default=None,
                 help="An allocation's address: 0x7f3a00 or 0x7f3a00_V (V = version)."),
    click.option("--version", "version", type=int, default=None,
                 help="Which allocation at --addr (0 = first at that address)."),
    click.option("--when", type=click.Choice(["alloc", "free"]), default="alloc", show_default=True,
                 help="Right after the allocation, or right after its free."),
    tree_options,
    prepare=_one_point,
)  # fmt: skip
def command(dev: DeviceTrace, event: int | None, time_us: int | None, addr: str | None,
            version: int | None, when: str, top: int, depth: int | None, all_frames: bool,
            min_share: float, hide: list[str] | None) -> Answer:  # fmt: skip
    """Total memory and what is live at an event, a time, or an allocation (or its free)."""
    from memlens.analysis.peak import live_set, memory_at_allocation, parse_address, resolve_event
    from memlens.views.text.live_set import render_at

    kw = live_kwargs(top, depth, all_frames, min_share, hide)
    if addr is not None:
        a, v = parse_address(addr)
        at_alloc = memory_at_allocation(dev, a, version if version is not None else v, when, **kw)
        return Answer(at_alloc, render_at, dev.device, when)
    result = live_set(dev, resolve_event(dev, event=event, time_us=time_us), **kw)
    return Answer(result, render_at, dev.device, None)

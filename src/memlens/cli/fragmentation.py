"""`memlens fragmentation SNAP [--event N]`: reserved minus active over time, free space and
the largest free block; with --event, the allocator state (segments and blocks) there."""

from __future__ import annotations

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import event_option, points_option
from memlens.snapshot.model import DeviceTrace


@analysis_command(
    "fragmentation",
    event_option(help="Reconstruct segments and blocks after this event (-1: before the first)."),
    click.option("--blocks/--no-blocks", default=True, show_default=True,
                 help="With --event: list every segment and block (in --json; the text shows segments)."),
    points_option(200),
    hide=False,
)  # fmt: skip
def command(dev: DeviceTrace, event: int | None, blocks: bool, points: int) -> Answer:
    """Allocator state and fragmentation (as PyTorch's Allocator State History, backwards
    from the exact final state)."""
    from memlens.analysis.allocator_state import fragmentation, state_at
    from memlens.views.text.fragmentation import render_fragmentation, render_state

    if event is not None:
        return Answer(state_at(dev, event, blocks=blocks), render_state, blocks)
    return Answer(fragmentation(dev, points=points), render_fragmentation, dev.device)

"""`memlens peak SNAP [--event N]`: what is live at the peak (or after event N)."""

from __future__ import annotations

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import event_option, live_kwargs, tree_options
from memlens.snapshot.model import DeviceTrace


@analysis_command(
    "peak",
    event_option(help="Show the live set after this event instead of the peak (-1: before the first)."),
    tree_options,
)  # fmt: skip
def command(dev: DeviceTrace, event: int | None, top: int, depth: int | None, all_frames: bool,
            min_share: float, hide: list[str] | None) -> Answer:  # fmt: skip
    """What is live at the peak of active memory: by call stack (a tree with bytes at
    every level) and by first user frame."""
    from memlens.analysis.peak import live_set, peak
    from memlens.views.text.live_set import render_peak

    kw = live_kwargs(top, depth, all_frames, min_share, hide)
    result = peak(dev, **kw) if event is None else live_set(dev, event, **kw)
    return Answer(result, render_peak, dev.device, event is not None)

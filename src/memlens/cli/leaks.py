"""`memlens leaks SNAP`: allocations left alive by repeated stages, and growth per step."""

from __future__ import annotations

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import top_option
from memlens.snapshot.model import DeviceTrace


@analysis_command(
    "leaks",
    click.option("--stage", default=None,
                 help="Only stages whose name contains this text (one occurrence is enough)."),
    top_option(10),
    annotations=True,
)  # fmt: skip
def command(dev: DeviceTrace, stage: str | None, top: int, hide: list[str] | None) -> Answer:
    """Leaks and growth: allocations made inside repeated stages (training steps) and still
    alive at the end, memory that grows from step to step, and the sites responsible."""
    from memlens.analysis.leaks import leaks
    from memlens.views.text.leaks import render_leaks

    return Answer(leaks(dev, stage=stage, limit=top, hide_patterns=hide), render_leaks, dev.device)

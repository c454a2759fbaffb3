"""`memlens diff A.pickle B.pickle`: what changed between two snapshots."""

from __future__ import annotations

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import top_option
from memlens.snapshot.model import DeviceTrace


@analysis_command(
    "diff",
    top_option(20),
    opens="pair",
    device_help="Device of both (default: longest trace of each).",
)  # fmt: skip
def command(a: DeviceTrace, b: DeviceTrace, top: int, hide: list[str] | None,
            paths: tuple[str, str]) -> Answer:  # fmt: skip
    """Peak, baseline and reserved change; per call site, bytes at each peak and the
    change; stage by stage when both have annotations. A (SNAPSHOT) is the base, B
    (SNAPSHOT2) the new one."""
    from memlens.analysis.diff import diff
    from memlens.views.text.diff import render_diff

    result = diff(a, b, limit=top, hide_patterns=hide)
    return Answer(result, render_diff, (paths[0], a.device), (paths[1], b.device))

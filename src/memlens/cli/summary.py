"""`memlens summary SNAP`: headline figures and the top call sites at the peak."""

from __future__ import annotations

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import top_option
from memlens.snapshot.model import Snapshot


@analysis_command(
    "summary",
    top_option(10),
    opens="snapshot",
    device_help="Device ordinal (default: every device).",
)  # fmt: skip
def command(snap: Snapshot, top: int, device: int | None, hide: list[str] | None) -> Answer:
    """Devices, time span, baseline, peak (active and reserved), end state and top sites."""
    from memlens.analysis.summary import summarize
    from memlens.views.text.summary import render_summary

    return Answer(summarize(snap, device, top=top, hide_patterns=hide), render_summary)

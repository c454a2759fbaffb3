"""`memlens oom SNAP`: each out-of-memory entry: the request, the free memory reported,
what was live, fragmentation at that moment, and the top sites."""

from __future__ import annotations

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import top_option
from memlens.snapshot.model import Snapshot


@analysis_command(
    "oom",
    top_option(10),
    opens="snapshot",
    device_help="Device ordinal (default: every device with a trace).",
)  # fmt: skip
def command(snap: Snapshot, top: int, device: int | None, hide: list[str] | None) -> Answer:
    """Explain each OOM in the trace."""
    from memlens.analysis.oom import oom_report
    from memlens.views.text.oom import render_oom

    devices = [device] if device is not None else [d for d in snap.devices if d in snap.traces]
    results = [oom_report(snap.device(d), top=top, hide_patterns=hide) for d in devices]
    return Answer({"source": snap.source, "devices": results}, render_oom)

"""`memlens anomalies SNAP`: late frees (cross-stream use), large short-lived temporaries,
reserved memory far above active memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import top_option
from memlens.snapshot.model import DeviceTrace

# (option, type, default, help): the thresholds of each kind of anomaly
THRESHOLDS: list[tuple[str, type, object, str]] = [
    ("--late-events", int, 2,
     "A free is late when completed at least this many events after its request..."),
    ("--late-us", int, 0, "...and this many µs (timed traces)."),
    ("--temp-min", str, "64MiB", "Smallest temporary worth reporting."),
    ("--temp-events", int, 8, "Longest lifetime (events) of a temporary."),
    ("--gap-min", str, "1GiB", "Reserved minus active worth reporting..."),
    ("--gap-ratio", float, 0.5, "...and above this fraction of active."),
]  # fmt: skip


def threshold_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for name, kind, default, text in reversed(THRESHOLDS):
        f = click.option(name, type=kind, default=default, show_default=True, help=text)(f)
    return f


@analysis_command(
    "anomalies",
    threshold_options,
    top_option(10, "Items listed per kind."),
)
def command(dev: DeviceTrace, late_events: int, late_us: int, temp_min: str, temp_events: int,
            gap_min: str, gap_ratio: float, top: int, hide: list[str] | None) -> Answer:  # fmt: skip
    """Things worth a second look in a trace."""
    from memlens.analysis.anomalies import anomalies
    from memlens.units import parse_bytes
    from memlens.views.text.anomalies import render_anomalies

    r = anomalies(dev, late_min_events=late_events, late_min_us=late_us,
                  temp_min_bytes=parse_bytes(temp_min), temp_max_events=temp_events,
                  gap_min_bytes=parse_bytes(gap_min), gap_ratio=gap_ratio, limit=top,
                  hide_patterns=hide)  # fmt: skip
    return Answer(r, render_anomalies, dev.device, temp_events)

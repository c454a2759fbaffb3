"""`memlens ranks SNAP [SNAP...]`: peaks across the devices of one snapshot and across
several snapshot files (one per rank), imbalance, and the call sites that differ."""

from __future__ import annotations

from typing import Any

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import top_option


@analysis_command(
    "ranks",
    top_option(15, "How many differing sites to list."),
    opens="many",
    device_help="Only this device of each file (default: all).",
)  # fmt: skip
def command(snaps: list[tuple[str, Any]], top: int, device: int | None,
            hide: list[str] | None) -> Answer:  # fmt: skip
    """Compare devices / ranks: peak per rank, imbalance, sites that differ."""
    from memlens.analysis.ranks import ranks, traces_of
    from memlens.errors import MemlensError
    from memlens.views.text.ranks import render_ranks

    traces = traces_of(snaps, device)
    if not traces:
        raise MemlensError("no device with trace entries in the given snapshot(s)")
    return Answer(ranks(traces, limit=top, hide_patterns=hide), render_ranks)

"""Text of `memlens oom`: each out-of-memory entry explained."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import OomOutput
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, sites_lines


def render_oom(result: OomOutput, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    lines = []
    for r in result["devices"]:
        if not r["count"]:
            lines.append(f"device {r['device']}: no OOM in the trace")
            continue
        for o in r["ooms"]:
            lines += [
                f"device {r['device']}: OOM at event {o['event']:,}"
                + (f" (time_us {o['time_us']})" if o["time_us"] is not None else ""),
                f"  requested        {fb(o['requested_bytes'])}" + (f" at {o['site']}" if o["site"] else ""),
                f"  free on device   {fb(o['device_free_bytes'])} (reported by the driver)",
                f"  active           {fb(o['active_bytes'])} in {o['live_count']:,} allocations",
                f"  reserved         {fb(o['reserved_bytes'])} in {o['n_segments']:,} segments "
                f"({fb(o['reserved_unused_bytes'])} cached, not in use)",
                f"  largest free     {fb(o['largest_free_bytes'])} inside segments"
                + (" (the request would fit: a different stream or pool?)" if o["fits_in_a_free_block"] else ""),
                "  live at the OOM, by site:",
            ]  # fmt: skip
            lines += sites_lines(o["top_sites"], "    ")
    return "\n".join(lines)

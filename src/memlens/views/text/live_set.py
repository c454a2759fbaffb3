"""Text of `memlens peak` and `memlens at`: what is live at one point of the trace."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from memlens.analysis.results import AllocationLiveSet, LiveSet, PeakResult
from memlens.units import format_bytes
from memlens.views.text.lines import NO_OPTIONS, sites_lines, tree_lines, when_text


def render_peak(r: PeakResult | LiveSet, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    """`peak` at the peak, or after --event (options["event"])."""
    at_event = options.get("event") is not None
    return render_live_set(r, f"device {r['device']} " + ("live set" if at_event else "peak"))


def render_at(r: LiveSet | AllocationLiveSet, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    """`at`: after an event, or at the allocation ("when": alloc or free) of --addr."""
    if "allocation" not in r:
        return render_live_set(r, f"device {r['device']}")
    at_alloc = cast(AllocationLiveSet, r)
    a, when = at_alloc["allocation"], at_alloc["when"]
    title = (
        f"device {r['device']} at {when} of {a['address']}_{a['version']} ({a['bytes']:,} bytes)"
    )
    return render_live_set(r, title)


def alloc_when(event: int) -> str:
    """When an allocation was made: "alloc event 12", or "made before the trace" (-1: it
    was alive when the recording began), as the report says it."""
    return "made before the trace" if event < 0 else f"alloc event {event:,}"


def render_live_set(r: Mapping[str, Any], title: str) -> str:
    return "\n".join(live_set_lines(r, title))


def live_set_lines(r: Mapping[str, Any], title: str) -> list[str]:
    lines = [
        f"{title}: {format_bytes(r['active_bytes'])} active, "
        f"{format_bytes(r['reserved_bytes'])} reserved, {when_text(r['event'])}"
        + (f" (time_us {r['time_us']})" if r.get("time_us") is not None else "")
        + (f", {r['action']}" if r.get("action") else ""),
        f"{r['live_count']:,} live allocations",
    ]
    if r.get("by_site"):
        lines.append("")
        lines.append("by first user frame:")
        lines += sites_lines(r["by_site"])
    if r.get("tree"):
        lines.append("")
        lines.append("by call stack (outermost first):")
        lines += tree_lines(r["tree"])
    if r.get("largest"):
        lines.append("")
        lines.append("largest live allocations:")
        for a in r["largest"]:
            lines.append(
                f"  {format_bytes(a['bytes']):>12}  {a['address']}_{a['version']}  "
                f"{alloc_when(a['alloc_event'])}  {a['site']}"
            )
    return lines

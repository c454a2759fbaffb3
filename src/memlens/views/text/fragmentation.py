"""Text of `memlens fragmentation`: the gap over time, or the allocator state at an event."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import AllocatorState, FragmentationResult
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, table_lines, when_text


def render_fragmentation(
    result: FragmentationResult | AllocatorState, options: Mapping[str, Any] = NO_OPTIONS
) -> str:
    """The gap over time; or, for a state (--event), render_state (--blocks/--no-blocks)."""
    if "at_peak" not in result:
        return render_state(result, options.get("blocks", True))
    return _render_curve(result)


def _render_curve(result: Mapping[str, Any]) -> str:
    device = result["device"]
    lines = [
        f"device {device}: reserved minus active peaks at {fb(result['max_gap_bytes'])} "
        f"{when_text(result['max_gap_event'])}"
    ]
    for title, key in (("at the peak of active memory", "at_peak"), ("at the end", "end")):
        if result[key]:
            lines += ["", title + ":"] + _state_lines(result[key])[1:]
    return "\n".join(lines)


def render_state(result: Mapping[str, Any], blocks: bool) -> str:
    """state_at's result; with `blocks`, its 30 largest segments too."""
    lines = _state_lines(result)
    if blocks:
        segs = sorted(result["segments"], key=lambda s: -s["size"])[:30]
        lines += ["", "largest segments:"]
        lines += table_lines(
            ["segment", "size", "blocks", "free", "largest free", "expandable"],
            [
                [
                    s["address"],
                    fb(s["size"]),
                    len(s["blocks"]),
                    fb(s["free_bytes"]),
                    fb(s["largest_free_bytes"]),
                    "yes" if s["is_expandable"] else "",
                ]
                for s in segs
            ],
        )
    return "\n".join(lines)


def _state_lines(s: Mapping[str, Any]) -> list[str]:
    return [
        f"device {s['device']} {when_text(s['event'])}:",
        f"  reserved       {fb(s['reserved_bytes'])} in {s['n_segments']:,} segments",
        f"  active         {fb(s['active_bytes'])} in {s['n_blocks']:,} blocks",
        f"  free           {fb(s['free_bytes'])} (inside segments, blocks rounded to 512 B)",
        f"  largest free   {fb(s['largest_free_bytes'])}",
        f"  fragmentation  {100 * s['fragmentation']:.1f}% (1 - largest free / free)",
    ]

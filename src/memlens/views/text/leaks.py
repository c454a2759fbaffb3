"""Text of `memlens leaks`: per repeated stage, its growth, occurrences and suspect sites."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import LeaksResult
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, elide, signed_bytes, sites_lines, table_lines


def _groups_line(n: int) -> str:
    """How many repeated stages were compared, in words."""
    if n == 0:
        return "no repeated stages to compare"
    return "1 repeated stage" if n == 1 else f"{n:,} repeated stages"


def render_leaks(result: LeaksResult, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    device = result["device"]
    lines = [f"device {device}: {_groups_line(len(result['groups']))}"]
    lines += [f"note: {n}" for n in result["notes"]]
    for g in result["groups"]:
        lines += [
            "",
            f"{g['base_name']} x{g['count']}: growth {signed_bytes(g['growth_bytes'])} "
            f"({signed_bytes(g['growth_per_step_bytes'])} per step"
            + (
                f"; {signed_bytes(g['steady_growth_bytes'])} after the first"
                if g["steady_growth_bytes"] is not None
                else ""
            )
            + "); "
            f"suspects {fb(g['suspects_bytes'])} in {g['suspects_count']:,} allocations",
        ]
        shown, hidden = elide(g["occurrences"], 5, 3)
        rows = [
            [
                f"{o['name']} [{o['occurrence']}]",
                fb(o["start_bytes"]),
                fb(o["end_bytes"]),
                fb(o["left_alive_bytes"]),
            ]
            for o in shown
        ]
        if hidden:
            rows.insert(5, [f"... {hidden:,} more (--json)", "", "", ""])
        lines += table_lines(["occurrence", "start", "end", "left alive"], rows)
        if g["suspects"]:
            lines.append("  left alive in several occurrences (suspects), by site:")
            lines += sites_lines(g["suspects"], "    ")
        if g["first_only"]:
            lines.append(
                "  left alive by the first occurrence only (one-time state, not a leak): "
                + fb(g["first_only_bytes"])
            )
            lines += sites_lines(g["first_only"], "    ")
        if g["grew"]:
            lines.append("  grew from the first occurrence to the last, by site:")
            lines += sites_lines(g["grew"], "    ")
    return "\n".join(lines)

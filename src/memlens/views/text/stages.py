"""Text of `memlens stages`: the stage table, the sites that grew, repeated stages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.inferred_steps import is_inferred_step
from memlens.analysis.results import StagesOutput
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, elide, signed_bytes, sites_lines, table_lines

TEXT_STAGES = 40  # stages listed; the rest are counted (the JSON has them all)


def occurrence_suffix(s: Mapping[str, Any]) -> str:
    """' [n]' after the n-th repeat of a stage name (the first has none): 'forward [3]'. The
    report names stages the same way."""
    return f" [{s['occurrence']}]" if s["occurrence"] else ""


def render_stages(result: StagesOutput, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    """`result`: stage_table's, with "repeated" (compare_steps' groups) and, on the stages
    shown, "grew" and "shrank" (site_changes)."""
    lines = [f"device {result['device']}: {len(result['stages'])} stages"]
    lines += [f"note: {n}" for n in result["notes"]]
    rows = []
    shown, hidden = elide(result["stages"], TEXT_STAGES)
    for s in shown:
        label = "  " * s["depth"] + s["name"] + occurrence_suffix(s)
        if s.get("crosses"):  # overlaps a neighbour without nesting (not a child of it)
            label += " (crosses)"
        if is_inferred_step(s):  # its phases are under it
            label += " (inferred)"
        ev = (
            f"{s['first_event']}..{s['last_event']}"
            if s["last_event"] >= s["first_event"]
            else "(no events)"
        )
        rows.append(
            [
                label,
                ev,
                fb(s["active_start_bytes"]),
                fb(s["peak_bytes"]),
                fb(s["active_end_bytes"]),
                signed_bytes(s["net_bytes"]),
                fb(s["allocated_bytes"]),
                fb(s["freed_bytes"]),
            ]
        )
    if rows:
        lines += table_lines(
            ["stage", "events", "start", "peak", "end", "net", "allocated", "freed"], rows
        )
    if hidden:
        lines.append(f"  ... {hidden:,} more stages (--name TEXT, --max-depth N or --json)")
    for s in [s for s in shown if s.get("grew") or s.get("shrank")][:10]:
        name = f"{s['name']}{occurrence_suffix(s)}"
        if s.get("grew"):
            lines += ["", f"sites that grew in {name}:"]
            lines += sites_lines(s["grew"])
        if s.get("shrank"):  # freed what was made before the stage: no count of its own
            lines += ["", f"sites that shrank in {name}:"]
            lines += [f"  {signed_bytes(x['bytes']):>12}  {x['site']}" for x in s["shrank"]]
    for g in result["repeated"]:
        lines.append("")
        lines.append(
            f"repeated: {g['base_name']} x{g['count']}  "
            f"(end growth {signed_bytes(g['end_growth_bytes'])})"
        )
        steps_shown, steps_hidden = elide(g["steps"], 5, 3)
        srows = [
            [
                r["name"] + f" [{r['occurrence']}]",
                fb(r["peak_bytes"]),
                "" if r["delta_peak_bytes"] is None else signed_bytes(r["delta_peak_bytes"]),
                fb(r["active_end_bytes"]),
                "" if r["delta_end_bytes"] is None else signed_bytes(r["delta_end_bytes"]),
            ]
            for r in steps_shown
        ]
        if steps_hidden:
            srows.insert(5, [f"... {steps_hidden:,} more (--json)", "", "", "", ""])
        lines += table_lines(["step", "peak", "Δpeak", "end", "Δend"], srows)
    return "\n".join(lines)

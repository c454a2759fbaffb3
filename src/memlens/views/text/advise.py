"""Text of `memlens advise`: the replays, then the findings ranked by bytes at stake."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import AdviseResult
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, sites_lines, table_lines


def render_advise(result: AdviseResult, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    lines = [
        f"device {result['device']}: peak active {fb(result['peak_active_bytes'])}, "
        f"peak reserved {fb(result['peak_reserved_bytes'])}"
    ]
    if result["replays"]:
        lines.append("allocator replays of this trace's requests:")
        rows = [
            [
                ("recorded: " if r["recorded"] else "") + r["settings"],
                fb(r["peak_reserved_bytes"]),
                fb(r["saving_bytes"]),
                (
                    "reproduces the recording"
                    if not r["mismatched_events"]
                    else f"{r['mismatched_events']:,} events differ"
                )
                if r["recorded"]
                else ("" if r["oom_fits"] is None else "OOM fits" if r["oom_fits"] else "OOM"),
            ]
            for r in result["replays"]
        ]
        lines += table_lines(["settings", "peak reserved", "saving", ""], rows, "  ")
    if not result["findings"]:
        lines.append("no finding: nothing to change that memlens can size")
    else:
        lines.append("findings, largest first:")
        rows = [
            [str(k), f["kind"], fb(f["bytes"]), f["certainty"]]
            for k, f in enumerate(result["findings"], 1)
        ]
        lines += table_lines(["#", "finding", "bytes at stake", "how sure"], rows, "  ")
    for k, f in enumerate(result["findings"], 1):
        lines += [
            f"{k}. {f['kind']}: {fb(f['bytes'])} ({f['certainty']})",
            f"   {f['summary']}",
            f"   covers: {f['covers']}",
        ]
        lines += sites_lines(f["sites"], "     ")
        lines.append("   change:")
        lines += [f"     {line}" for line in f["change"].splitlines()]
    if result["checks"]:
        lines.append(
            "checked by simulating the script (the finding's estimate vs the "
            "simulated saving at the peak):"
        )
        for c in result["checks"]:
            head = f"  {c['finding'] + 1}. {c['kind']}: predicted {fb(c['predicted_bytes'])}"
            if c["simulated_saving_bytes"] is not None:
                head += (
                    f", simulated {fb(c['simulated_saving_bytes'])} with {c['knob']} "
                    f"(peak {c['compared']}, baseline "
                    f"{fb(c['simulated_baseline_bytes'] or 0)})"
                )
            elif c["knob"] is not None:
                head += f", {c['knob']} not measured"
            lines.append(head + (f": {c['note']}" if c["note"] else ""))
            lines += [f"     {a}" for a in c["applied"]]
    lines += [f"note: {n}" for n in result["notes"]]
    return "\n".join(lines)

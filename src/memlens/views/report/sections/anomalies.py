"""Anomalies: late frees, large temporaries and reserved memory far above active
(memlens.analysis.anomalies)."""

from __future__ import annotations

from memlens.analysis.anomalies import anomalies
from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import bytes_text, esc, figures, fmt_bytes, fmt_int, num, table
from memlens.views.report.sections.common import event_text, site_cell


def anomalies_section(ctx: ReportContext) -> str:
    r = anomalies(ctx.dev, hide_patterns=ctx.hide_patterns, top=10)
    late, temps, gaps = (
        r.get("late_frees") or {},
        r.get("large_temporaries") or {},
        r.get("reserved_gaps") or {},
    )
    out = figures([
        ("late frees", fmt_int(late.get("count", 0)), f"{bytes_text(late.get('bytes', 0))} held after free was requested"),
        ("large temporaries", fmt_int(temps.get("count", 0)), f"{bytes_text(temps.get('bytes', 0))} short-lived"),
        ("largest reserved-active gap", fmt_bytes(gaps.get("max_gap_bytes", 0)), f"at event {event_text(gaps.get('max_gap_event'))}"),
    ])  # fmt: skip
    for title, found in (
        ("Late frees (memory used on another stream) by site", late),
        ("Large short-lived temporaries by site", temps),
    ):
        if found.get("by_site"):
            rows = [
                [site_cell(s), num(fmt_bytes(s.get("bytes", 0))), fmt_int(s.get("count"))]
                for s in found["by_site"]
            ]
            out += f"<h3>{esc(title)}</h3>" + table(
                ["call site", "bytes", "count"], rows, numeric=(1, 2)
            )
    if gaps.get("stretches"):
        rows = [
            [
                f"{int(s['first_event']):,}\u2013{int(s['last_event']):,}",
                num(fmt_bytes(s["max_gap_bytes"])),
                event_text(s.get("max_gap_event")),
                num(fmt_bytes(s["active_bytes"])),
                num(fmt_bytes(s["reserved_bytes"])),
            ]
            for s in gaps["stretches"]
        ]
        out += "<h3>Reserved far above active</h3>" + table(
            ["events", "largest gap", "at event", "active there", "reserved there"],
            rows,
            numeric=(1, 3, 4),
        )
    return out


SECTION = Section("anomalies", "Anomalies", anomalies_section)

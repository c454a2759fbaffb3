"""Categories: memory by inferred category (memlens.analysis.categories), over the trace
and by compile context."""

from __future__ import annotations

from memlens.analysis.categories import by_compile_context, categories
from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import bytes_text, fmt_bytes, fmt_int, note, num, table
from memlens.views.report.sections.common import curve_chart, event_text, groups_table


def categories_section(ctx: ReportContext) -> str:
    result = categories(ctx.dev, hide_patterns=ctx.hide_patterns, top=3)
    total = int(result.get("active_bytes") or 0)
    # a category with nothing in it, ever, is only noise in the table
    cats = [
        c
        for c in result.get("categories") or []
        if c.get("peak_bytes") or c.get("allocated_bytes") or c.get("bytes")
    ]
    out = note(
        f"At the peak (after event {event_text(result.get('event'))}): {bytes_text(total)} active. "
        "Categories are inferred from stacks and lifetimes (docs/analyses.md)."
    )
    out += groups_table("category", cats, total)
    out += curve_chart(result.get("curve"), [c["name"] for c in cats], ctx.dev.n_events)
    out += compile_contexts(ctx)
    return out


def compile_contexts(ctx: ReportContext) -> str:
    result = by_compile_context(ctx.dev)
    if not result.get("has_context"):
        return ""
    rows = [
        [
            str(c["context"]),
            num(fmt_bytes(c["bytes"])),
            fmt_int(c["count"]),
            num(fmt_bytes(c["allocated_bytes"])),
            fmt_int(c["allocated_count"]),
        ]
        for c in result.get("contexts") or []
    ]
    return "<h3>By compile context</h3>" + table(
        ["compile context", "at the peak", "allocations", "allocated over the trace", "count"],
        rows,
        numeric=(1, 2, 3, 4),
    )


SECTION = Section("categories", "Categories", categories_section)

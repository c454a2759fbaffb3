"""Leaks and growth: repeated stages whose memory grows, and the suspects
(memlens.analysis.leaks)."""

from __future__ import annotations

from memlens.analysis.leaks import leaks
from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import (
    bytes_text,
    delta_text,
    esc,
    figures,
    fmt_bytes,
    fmt_delta,
    fmt_int,
    note,
    num,
    table,
)
from memlens.views.report.sections.common import site_cell


def leaks_section(ctx: ReportContext) -> str:
    result = leaks(ctx.dev, top=20, hide_patterns=ctx.hide_patterns)
    notes = "".join(note(n) for n in result.get("notes") or [])
    groups = result.get("groups") or []
    if not groups:
        return notes or note(
            "No repeated stages in this trace, so nothing to compare step by step."
        )
    parts = [notes]
    for g in groups:
        # growth in the first step alone (optimizer state made lazily) is no leak: say so
        steady = g["steady_growth_bytes"]
        per_step = "average" if steady is None else f"average; {delta_text(steady)} after the first"
        parts.append(
            f"<h3>{esc(g['base_name'])}: {int(g['count']):,} occurrences</h3>"
            + figures(
                [
                    ("growth", fmt_delta(g["growth_bytes"]), "first start to last start"),
                    ("per step", fmt_delta(g["growth_per_step_bytes"]), per_step),
                    (
                        "suspects",
                        fmt_bytes(g["suspects_bytes"]),
                        f"{int(g['suspects_count']):,} allocations alive at the end",
                    ),
                ]
            )
        )
        sus = g.get("suspects") or []
        if sus:
            rows = [
                [
                    site_cell(s),
                    num(fmt_bytes(s["bytes"])),
                    fmt_int(s["count"]),
                    ", ".join(bytes_text(b) for b in (s.get("per_occurrence") or [])[:12]),
                ]
                for s in sus
            ]
            parts.append(
                "<h3>Made inside the stage and still alive at the end</h3>"
                + table(
                    ["call site", "bytes", "allocations", "per occurrence"], rows, numeric=(1, 2)
                )
            )
        grew = g.get("grew") or []
        if grew:
            rows = [
                [site_cell(s), num(fmt_delta(s["bytes"])), fmt_int(s.get("count"))] for s in grew
            ]
            parts.append(
                "<h3>Sites whose live bytes grew</h3>"
                + table(["call site", "growth", "allocations"], rows, numeric=(1, 2))
            )
    return "".join(parts)


SECTION = Section("leaks", "Leaks and growth", leaks_section)

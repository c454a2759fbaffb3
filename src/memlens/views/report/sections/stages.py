"""Stages: each annotated stage's memory (memlens.analysis.stages), and repeated stages
compared step by step."""

from __future__ import annotations

from memlens.analysis.inferred_steps import is_inferred_step
from memlens.analysis.results import StageTable
from memlens.analysis.stages import compare_steps, sites_that_grew, stage_table
from memlens.views.report.context import ReportContext, Section, SectionUnavailable
from memlens.views.report.page import bytes_text, esc, fmt_bytes, fmt_delta, note, num, table
from memlens.views.report.sections.common import sites_cell
from memlens.views.text.stages import occurrence_suffix

MAX_STAGE_ROWS = 100


def stages_section(ctx: ReportContext) -> str:
    result = stage_table(ctx.dev, top=0)
    stages = result.get("stages") or []
    for s in stages[:MAX_STAGE_ROWS]:  # only the rows shown need their sites
        s["grew"] = sites_that_grew(ctx.dev, s, top=3, hide_patterns=ctx.hide_patterns)
    notes = "".join(note(n) for n in result.get("notes") or [])
    if not stages:
        raise SectionUnavailable(
            "this snapshot has no stage annotations (record_function / memlens.stage) for this device"
        )
    rows = []
    for s in stages[:MAX_STAGE_ROWS]:
        name = ("\u2003" * int(s.get("depth") or 0)) + str(s["name"]) + occurrence_suffix(s)
        edge = (
            " (inferred)"
            if is_inferred_step(s)
            else " (began before the trace)"
            if s.get("open_start")
            else " (still open at the end)"
            if s.get("open_end")
            else ""
        )
        last = int(s["last_event"])
        events = (
            "none" if last < int(s["first_event"]) else f"{int(s['first_event']):,}\u2013{last:,}"
        )
        rows.append(
            [
                name + edge,
                num(events),
                num(fmt_bytes(s["active_start_bytes"])),
                num(fmt_bytes(s["active_end_bytes"])),
                num(fmt_bytes(s["peak_bytes"])),
                num(fmt_bytes(s["allocated_bytes"])),
                num(fmt_bytes(s["freed_bytes"])),
                num(fmt_delta(s["net_bytes"])),
                sites_cell((s.get("grew") or [])[:2]),
            ]
        )
    more = (
        note(f"Showing the first {MAX_STAGE_ROWS:,} of {len(stages):,} stages.")
        if len(stages) > MAX_STAGE_ROWS
        else ""
    )
    out = (
        notes
        + table(
            [
                "stage",
                "events",
                "at start",
                "at end",
                "peak inside",
                "allocated",
                "freed",
                "net",
                "sites that grew",
            ],
            rows,
            numeric=(1, 2, 3, 4, 5, 6, 7),
        )
        + more
    )
    return out + steps_html(ctx, result)


def steps_html(ctx: ReportContext, result: StageTable) -> str:
    """Repeated stages (training steps, optimizer steps) compared step by step."""
    groups = compare_steps(ctx.dev, table=result).get("groups") or []
    parts = []
    for g in groups:
        rows = [
            [
                str(st["name"]) + occurrence_suffix(st),
                num(fmt_bytes(st["peak_bytes"])),
                num(fmt_delta(st.get("delta_peak_bytes"))),
                num(fmt_bytes(st["active_start_bytes"])),
                num(fmt_bytes(st["active_end_bytes"])),
                num(fmt_delta(st.get("delta_end_bytes"))),
                num(fmt_delta(st["net_bytes"])),
            ]
            for st in (g.get("steps") or [])[:MAX_STAGE_ROWS]
        ]
        parts.append(
            f"<h3>Repeated stage {esc(g['base_name'])}: {int(g['count']):,} times</h3>"
            + note(
                f"Peak from {bytes_text(g['peak_min_bytes'])} to {bytes_text(g['peak_max_bytes'])}; "
                f"memory at the end grew by {bytes_text(g['end_growth_bytes'])} from the first to the last."
            )
            + table(
                [
                    "step",
                    "peak",
                    "peak vs previous",
                    "at start",
                    "at end",
                    "end vs previous",
                    "net",
                ],
                rows,
                numeric=(1, 2, 3, 4, 5, 6),
            )
        )
    return "".join(parts)


SECTION = Section("stages", "Stages", stages_section)

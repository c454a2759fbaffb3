"""Rules: memory by the user's own rules file (memlens.analysis.rules), shown only with
--rules."""

from __future__ import annotations

from memlens.analysis.rules import load_rules, rules_analysis
from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import note
from memlens.views.report.sections.common import curve_chart, event_text, groups_table


def has_rules(ctx: ReportContext) -> bool:
    return ctx.rules_path is not None


def rules_section(ctx: ReportContext) -> str:
    assert ctx.rules_path is not None  # the section is shown only with --rules
    rules = load_rules(ctx.rules_path)
    result = rules_analysis(ctx.dev, rules, hide_patterns=ctx.hide_patterns)
    items = result.get("rules") or []
    out = note(
        f"Rules from {ctx.rules_path} (first match wins), at the peak (after event {event_text(result.get('event'))})."
    )
    out += groups_table("rule", items, int(result.get("active_bytes") or 0), pattern=True)
    return out + curve_chart(result.get("curve"), [r["name"] for r in items], ctx.dev.n_events)


SECTION = Section("rules", "Rules", rules_section, has_rules)

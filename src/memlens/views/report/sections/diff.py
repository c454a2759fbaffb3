"""Diff: A against B (memlens.analysis.diff), and the timeline of B."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.diff import diff
from memlens.snapshot.model import DeviceTrace
from memlens.views.report.context import ReportContext, Section, guarded
from memlens.views.report.page import (
    Cell,
    fmt_bytes,
    fmt_delta,
    fmt_int,
    note,
    num,
    site_code,
    table,
)
from memlens.views.report.sections.timeline import timeline_section


def has_second(ctx: ReportContext) -> bool:
    return ctx.dev2 is not None


FIGURE_LABELS = {
    "peak_active_bytes": "peak active",
    "peak_reserved_bytes": "peak reserved",
    "baseline_bytes": "baseline",
    "end_active_bytes": "end active",
    "end_reserved_bytes": "end reserved",
    "trace_entries": "trace entries",
}
STATUS = {"both": "", "only_a": "only in A", "only_b": "only in B"}


def _pct(figure: Mapping[str, Any]) -> str:
    p = figure.get("change_pct")
    if p is None:  # A was 0
        return "" if not figure.get("change") else "new"
    return f"{p:+.2f}%"


def _device_b(ctx: ReportContext) -> DeviceTrace:
    assert ctx.dev2 is not None  # the section is shown only with a second snapshot
    return ctx.dev2


def diff_section(ctx: ReportContext) -> str:
    a_name, b_name = ctx.names
    parts = [
        note(
            f"A = {a_name} (device {ctx.dev.device}); B = {b_name} (device {_device_b(ctx).device})."
        ),
        guarded(ctx, "Diff", diff_tables),
        "<h3>Timeline of B</h3>",
        guarded(ctx, "Diff timeline", lambda c: timeline_section(c, key="b")),
    ]
    return "".join(p for p in parts if p)


def diff_tables(ctx: ReportContext) -> str:
    """The diff analysis: headline figures, per call site at each peak, stage by stage."""
    r = diff(ctx.dev, _device_b(ctx), top=30, hide_patterns=ctx.hide_patterns)
    rows = []
    for f in r.get("figures") or []:
        is_count = f["name"] == "trace_entries"
        fmt = fmt_int if is_count else fmt_bytes
        change = f"{int(f['change']):+,}" if is_count else fmt_delta(f["change"])
        rows.append(
            [
                FIGURE_LABELS.get(f["name"], f["name"]),
                num(fmt(f["a"])),
                num(fmt(f["b"])),
                num(change),
                _pct(f),
            ]
        )
    out = table(["", "A", "B", "change", "change %"], rows, numeric=(1, 2, 3, 4))
    sites = r.get("sites") or []
    rows = [
        [
            Cell(site_code(s["site"])),
            num(fmt_bytes(s["a_bytes"])),
            num(fmt_bytes(s["b_bytes"])),
            num(fmt_delta(s["change"])),
            f"{fmt_int(s['a_count'])} \u2192 {fmt_int(s['b_count'])}",
            STATUS.get(s["status"], s["status"]),
        ]
        for s in sites
    ]
    total = int(r.get("sites_total") or len(sites))
    out += "<h3>Call sites live at each peak</h3>" + note(
        f"By first user frame, largest change first ({len(sites):,} of {total:,} sites)."
    )
    out += table(
        ["call site", "A at its peak", "B at its peak", "change", "allocations", ""],
        rows,
        numeric=(1, 2, 3),
    )
    stages = r.get("stages")
    if stages:
        rows = [
            [
                f"{st['name']}" + (f" #{st['occurrence']}" if st.get("occurrence") else ""),
                num(fmt_bytes(st.get("a_peak_bytes"))),
                num(fmt_bytes(st.get("b_peak_bytes"))),
                num(fmt_delta(st.get("peak_change"))),
                num(fmt_delta(st.get("a_net_bytes"))),
                num(fmt_delta(st.get("b_net_bytes"))),
                num(fmt_delta(st.get("net_change"))),
                STATUS.get(st.get("status"), st.get("status")),
            ]
            for st in stages
        ]
        out += "<h3>Stage by stage</h3>" + table(
            ["stage", "A peak", "B peak", "peak change", "A net", "B net", "net change", ""],
            rows,
            numeric=(1, 2, 3, 4, 5, 6),
        )
    elif stages is None:
        out += note("Stage by stage: needs annotations in both snapshots.")
    return out


# with two snapshots the comparison is what the reader came for: right after A's figures
SECTION = Section("diff", "Diff: A vs B", diff_section, has_second)

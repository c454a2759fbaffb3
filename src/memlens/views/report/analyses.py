"""Report sections backed by the analyses (memlens.analysis.*): stages, categories, rules,
leaks, anomalies, OOMs, allocator state. Each calls its analysis and renders the result;
nothing here computes memory figures itself."""

from __future__ import annotations

from typing import Any

from memlens.snapshot.model import DeviceTrace
from memlens.views.report.context import ReportContext, SectionUnavailable, analysis
from memlens.views.report.page import (
    Cell,
    bytes_text,
    esc,
    figures,
    fmt_bytes,
    fmt_delta,
    fmt_int,
    note,
    num,
    site_code,
    table,
)
from memlens.views.report.stacked import stacked_svg

MAX_STAGE_ROWS = 100


def _site(s: dict[str, Any]) -> Cell:
    return Cell(site_code(s.get("site", "")))


def _sites_cell(sites: list[dict[str, Any]], key: str = "bytes") -> Cell:
    """A few sites in one cell: 'site (bytes)' per line."""
    lines = [f"{site_code(s.get('site', ''))} {fmt_bytes(s.get(key, 0))}" for s in sites]
    return Cell("<br>".join(lines))


def _event(e: Any) -> str:
    return "before the first event" if e is None or int(e) < 0 else f"{int(e):,}"


# ---- stages -----------------------------------------------------------------------------
def stages_section(ctx: ReportContext) -> str:
    mod = analysis("stages")
    result = mod.stage_table(ctx.dev, top=0)
    stages = result.get("stages") or []
    for s in stages[:MAX_STAGE_ROWS]:  # only the rows shown need their sites
        s["grew"] = mod.sites_that_grew(ctx.dev, s, top=3, hide_patterns=ctx.hide_patterns)
    notes = "".join(note(n) for n in result.get("notes") or [])
    if not stages:
        raise SectionUnavailable(
            "this snapshot has no stage annotations (record_function / memlens.stage) for this device"
        )
    rows = []
    for s in stages[:MAX_STAGE_ROWS]:
        name = ("\u2003" * int(s.get("depth") or 0)) + str(s["name"])
        edge = (
            " (began before the trace)"
            if s.get("open_start")
            else " (still open at the end)"
            if s.get("open_end")
            else ""
        )
        last = int(s["last_event"])
        events = (
            "none" if last < int(s["first_event"]) else f"{int(s['first_event']):,}\u2013{last:,}"
        )
        rows.append([
            name + edge, num(events),
            num(fmt_bytes(s["active_start_bytes"])), num(fmt_bytes(s["active_end_bytes"])),
            num(fmt_bytes(s["peak_bytes"])), num(fmt_bytes(s["allocated_bytes"])),
            num(fmt_bytes(s["freed_bytes"])), num(fmt_delta(s["net_bytes"])),
            _sites_cell((s.get("grew") or [])[:2]),
        ])  # fmt: skip
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
    return out + steps_html(mod, ctx, result)


def steps_html(mod: Any, ctx: ReportContext, result: dict[str, Any]) -> str:
    """Repeated stages (training steps, optimizer steps) compared step by step."""
    groups = mod.compare_steps(ctx.dev, table=result).get("groups") or []
    parts = []
    for g in groups:
        rows = [
            [str(st["name"]), num(fmt_bytes(st["peak_bytes"])), num(fmt_delta(st.get("delta_peak_bytes"))),
             num(fmt_bytes(st["active_start_bytes"])), num(fmt_bytes(st["active_end_bytes"])),
             num(fmt_delta(st.get("delta_end_bytes"))), num(fmt_delta(st["net_bytes"]))]
            for st in (g.get("steps") or [])[:MAX_STAGE_ROWS]
        ]  # fmt: skip
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


def stage_ranges(dev: DeviceTrace) -> list[tuple[int, int, str, int]]:
    """(first, last, label, depth) of each stage, for the timeline's bands."""
    return [tuple(r) for r in analysis("stages").stage_ranges(dev)]


# ---- categories -------------------------------------------------------------------------
def categories_section(ctx: ReportContext) -> str:
    mod = analysis("categories")
    result = mod.categories(ctx.dev, hide_patterns=ctx.hide_patterns, top=3)
    total = int(result.get("active_bytes") or 0)
    # a category with nothing in it, ever, is only noise in the table
    cats = [
        c
        for c in result.get("categories") or []
        if c.get("peak_bytes") or c.get("allocated_bytes") or c.get("bytes")
    ]
    out = note(f"At the peak (after event {_event(result.get('event'))}): {bytes_text(total)} active. "
               "Categories are inferred from stacks and lifetimes (docs/analyses.md).")  # fmt: skip
    out += _groups_table("category", cats, total)
    out += _curve_chart(result.get("curve"), [c["name"] for c in cats], ctx.dev.n_events)
    out += compile_contexts(mod, ctx)
    return out


def _groups_table(
    kind: str, groups: list[dict[str, Any]], total: int, *, pattern: bool = False
) -> str:
    """Categories and rules alike: per group, bytes and share at the peak, its own peak,
    what it allocated over the trace and its top sites (rules add their pattern)."""
    rows = [
        [g["name"]]
        + ([Cell(f"<code>{esc(g.get('pattern') or '')}</code>")] if pattern else [])
        + [num(fmt_bytes(g["bytes"])), f"{100 * g['bytes'] / total:.1f}%" if total else "",
           fmt_int(g["count"]), num(fmt_bytes(g["peak_bytes"])),
           num(fmt_bytes(g["allocated_bytes"])), _sites_cell((g.get("top_sites") or [])[:3])]
        for g in groups
    ]  # fmt: skip
    first = 2 if pattern else 1
    return table(
        [kind] + (["pattern"] if pattern else [])
        + ["at the peak", "share", "allocations", "own peak", "allocated over the trace",
           "top sites"],
        rows,
        numeric=range(first, first + 5),
    )  # fmt: skip


def compile_contexts(mod: Any, ctx: ReportContext) -> str:
    fn = getattr(mod, "by_compile_context", None)
    if fn is None:
        return ""
    result = fn(ctx.dev)
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


def _curve_chart(curve: dict[str, Any] | None, names: list[str], n_events: int) -> str:
    if not curve or not curve.get("event"):
        return ""
    by_name = curve.get("bytes") or {}
    series = [(n, by_name[n]) for n in names if n in by_name and any(by_name[n])]
    if not series:
        return ""
    return "<h3>Over the trace</h3>" + stacked_svg(curve["event"], series, n_events)


# ---- rules ------------------------------------------------------------------------------
def has_rules(ctx: ReportContext) -> bool:
    return ctx.rules_path is not None


def rules_section(ctx: ReportContext) -> str:
    mod = analysis("rules")
    rules = mod.load_rules(ctx.rules_path)
    result = mod.rules_analysis(ctx.dev, rules, hide_patterns=ctx.hide_patterns)
    items = result.get("rules") or []
    out = note(
        f"Rules from {ctx.rules_path} (first match wins), at the peak (after event {_event(result.get('event'))})."
    )
    out += _groups_table("rule", items, int(result.get("active_bytes") or 0), pattern=True)
    return out + _curve_chart(result.get("curve"), [r["name"] for r in items], ctx.dev.n_events)


# ---- leaks ------------------------------------------------------------------------------
def leaks_section(ctx: ReportContext) -> str:
    result = analysis("leaks").leaks(ctx.dev, hide_patterns=ctx.hide_patterns)
    notes = "".join(note(n) for n in result.get("notes") or [])
    groups = result.get("groups") or []
    if not groups:
        return notes or note(
            "No repeated stages in this trace, so nothing to compare step by step."
        )
    parts = [notes]
    for g in groups:
        parts.append(
            f"<h3>{esc(g['base_name'])}: {int(g['count']):,} occurrences</h3>"
            + figures(
                [
                    ("growth", fmt_delta(g["growth_bytes"]), "first start to last start"),
                    ("per step", fmt_delta(g["growth_per_step_bytes"]), "average"),
                    (
                        "suspects",
                        fmt_bytes(g["suspects_bytes"]),
                        f"{int(g['suspects_count']):,} allocations alive at the end",
                    ),
                ]
            )  # fmt: skip
        )
        sus = g.get("suspects") or []
        if sus:
            rows = [[_site(s), num(fmt_bytes(s["bytes"])), fmt_int(s["count"]),
                     ", ".join(bytes_text(b) for b in (s.get("per_occurrence") or [])[:12])] for s in sus]  # fmt: skip
            parts.append(
                "<h3>Made inside the stage and still alive at the end</h3>"
                + table(
                    ["call site", "bytes", "allocations", "per occurrence"], rows, numeric=(1, 2)
                )
            )
        grew = g.get("grew") or []
        if grew:
            rows = [[_site(s), num(fmt_delta(s["bytes"])), fmt_int(s.get("count"))] for s in grew]
            parts.append(
                "<h3>Sites whose live bytes grew</h3>"
                + table(["call site", "growth", "allocations"], rows, numeric=(1, 2))
            )
    return "".join(parts)


# ---- anomalies --------------------------------------------------------------------------
def anomalies_section(ctx: ReportContext) -> str:
    r = analysis("anomalies").anomalies(ctx.dev, hide_patterns=ctx.hide_patterns, limit=10)
    late, temps, gaps = (
        r.get("late_frees") or {},
        r.get("large_temporaries") or {},
        r.get("reserved_gaps") or {},
    )
    out = figures([
        ("late frees", fmt_int(late.get("count", 0)), f"{bytes_text(late.get('bytes', 0))} held after free was requested"),
        ("large temporaries", fmt_int(temps.get("count", 0)), f"{bytes_text(temps.get('bytes', 0))} short-lived"),
        ("largest reserved-active gap", fmt_bytes(gaps.get("max_gap_bytes", 0)), f"at event {_event(gaps.get('max_gap_event'))}"),
    ])  # fmt: skip
    for title, found in (("Late frees (memory used on another stream) by site", late),
                         ("Large short-lived temporaries by site", temps)):  # fmt: skip
        if found.get("by_site"):
            rows = [
                [_site(s), num(fmt_bytes(s.get("bytes", 0))), fmt_int(s.get("count"))]
                for s in found["by_site"]
            ]
            out += f"<h3>{esc(title)}</h3>" + table(
                ["call site", "bytes", "count"], rows, numeric=(1, 2)
            )
    if gaps.get("stretches"):
        rows = [[f"{int(s['first_event']):,}\u2013{int(s['last_event']):,}", num(fmt_bytes(s["max_gap_bytes"])),
                 _event(s.get("max_gap_event")), num(fmt_bytes(s["active_bytes"])), num(fmt_bytes(s["reserved_bytes"]))]
                for s in gaps["stretches"]]  # fmt: skip
        out += "<h3>Reserved far above active</h3>" + table(
            ["events", "largest gap", "at event", "active there", "reserved there"],
            rows,
            numeric=(1, 3, 4),
        )
    return out


# ---- OOM --------------------------------------------------------------------------------
def has_oom(ctx: ReportContext) -> bool:
    return len(ctx.dev.events_of("oom")) > 0


def oom_section(ctx: ReportContext) -> str:
    r = analysis("oom").oom_report(ctx.dev, top=10, hide_patterns=ctx.hide_patterns)
    parts = []
    for o in r.get("ooms") or []:
        parts.append(
            f"<h3>Out of memory at event {_event(o['event'])}</h3>"
            + figures(
                [
                    ("requested", fmt_bytes(o["requested_bytes"]), "the allocation that failed"),
                    (
                        "free on the device",
                        fmt_bytes(o["device_free_bytes"]),
                        "as the driver reported",
                    ),
                    (
                        "active",
                        fmt_bytes(o["active_bytes"]),
                        f"{int(o['live_count']):,} live allocations",
                    ),
                    (
                        "reserved",
                        fmt_bytes(o["reserved_bytes"]),
                        f"{bytes_text(o['reserved_unused_bytes'])} reserved but unused",
                    ),
                    (
                        "largest free block",
                        fmt_bytes(o.get("largest_free_bytes")),
                        f"{fmt_int(o.get('n_segments'))} segments",
                    ),
                ]
            )  # fmt: skip
            + _oom_notes(o)
            + "<h3>What was live: top sites</h3>"
            + _sites_table(o.get("top_sites") or [])
        )
    return "".join(parts) or note("No OOM entries.")


def _oom_notes(o: dict[str, Any]) -> str:
    out = []
    site = o.get("stack_site") or o.get("site")
    if site:
        out.append(f"The failing request came from {site}.")
    fits = o.get("fits_in_a_free_block")
    if fits is not None:
        out.append(
            "It would have fitted in a free cached block: fragmentation, not a lack of memory."
            if fits
            else "No free cached block was large enough for it."
        )
    return "".join(note(t) for t in out)


def _sites_table(sites: list[dict[str, Any]]) -> str:
    rows = [[_site(s), num(fmt_bytes(s["bytes"])), fmt_int(s.get("count"))] for s in sites]
    return table(["call site", "bytes", "allocations"], rows, numeric=(1, 2))


# ---- allocator state --------------------------------------------------------------------
def allocator_state_section(ctx: ReportContext) -> str:
    mod = analysis("allocator_state")
    dev = ctx.dev
    points = [("at the peak of active memory", dev.peak_event_index)]
    if dev.peak_reserved_event_index != dev.peak_event_index:
        points.append(("at the peak of reserved memory", dev.peak_reserved_event_index))
    if dev.n_events:
        points.append(("at the end", dev.n_events - 1))
    rows = []
    for label, ev in points:
        s = mod.state_at(dev, ev, blocks=False)
        rows.append([label, _event(ev), num(fmt_bytes(s["reserved_bytes"])), num(fmt_bytes(s["allocated_bytes"])),
                     num(fmt_bytes(s["free_bytes"])), num(fmt_bytes(s["largest_free_bytes"])),
                     f"{100 * float(s['fragmentation']):.1f}%", fmt_int(s["n_segments"]), fmt_int(s["n_blocks"])])  # fmt: skip
    out = table(
        [
            "when",
            "event",
            "reserved",
            "allocated",
            "free (cached)",
            "largest free block",
            "fragmentation",
            "segments",
            "blocks",
        ],
        rows,
        numeric=(2, 3, 4, 5, 6, 7, 8),
    )
    out += note(
        "Reconstructed backwards from the final allocator state. Fragmentation = 1 - largest free block / free bytes."
    )
    frag = mod.fragmentation(dev)
    if frag.get("max_gap_bytes") is not None:
        out += note(
            f"Reserved minus active is largest, {bytes_text(frag['max_gap_bytes'])}, after event {_event(frag.get('max_gap_event'))}."
        )
    return out

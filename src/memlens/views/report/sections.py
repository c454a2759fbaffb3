"""The report's sections for one snapshot. Each returns HTML (already safe) or None to be
left out; analyses are called, never reimplemented, and a missing one raises
SectionUnavailable so the section shows a short note instead."""

from __future__ import annotations

from typing import Any

from memlens.analysis.sites import top_sites
from memlens.snapshot.model import DeviceTrace
from memlens.views.report.bands import AllocationBands, allocation_bands
from memlens.views.report.context import ReportContext, SectionUnavailable, analysis, guarded
from memlens.views.report.icicle import peak_trees
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
from memlens.views.report.timeline import GEOMETRY, StageBand, downsample, make_scale, timeline_svg
from memlens.views.text.summary import notable_settings


def sites_table(sites: list[dict[str, Any]], total: int | None = None) -> str:
    """Call sites (as top_sites returns them) with bytes, share and count."""
    rows = []
    for s in sites:
        share = f"{100 * s['bytes'] / total:.1f}%" if total else ""
        rows.append(
            [
                Cell(site_code(s["site"])),
                num(fmt_bytes(s["bytes"])),
                share,
                fmt_int(s["count"]),
            ]
        )
    return table(
        ["call site (first user frame)", "bytes", "share", "allocations"], rows, numeric=(1, 2, 3)
    )


# ---- overview ---------------------------------------------------------------------------
def overview(ctx: ReportContext) -> str:
    s = ctx.summary
    when = (
        f"after event {s['peak_event_index']:,}"
        if s["peak_event_index"] >= 0
        else "before the first event"
    )
    span = f"{s['duration_s']:.3f} s" if s["duration_s"] is not None else "untimed"
    figs = figures(
        [
            ("peak active", fmt_bytes(s["peak_active_bytes"]), when),
            (
                "peak reserved",
                fmt_bytes(s["peak_reserved_bytes"]),
                f"start {bytes_text(s['reserved_start_bytes'])}, end {bytes_text(s['end_reserved_bytes'])}",
            ),
            ("baseline", fmt_bytes(s["baseline_bytes"]), "alive before the first event"),
            ("end active", fmt_bytes(s["end_active_bytes"]), "alive after the last event"),
            ("trace entries", fmt_int(s["trace_entries"]), span),
            ("allocations", fmt_int(s["allocations"]), f"{s['live_at_peak']:,} live at the peak"),
        ]
    )
    notes = []
    if s["truncated"]:
        notes.append(
            "The trace is truncated: the allocator's ring buffer was full, older events are missing."
        )
    if s["starts_mid_run"]:
        notes.append(
            f"{s['preexisting_freed_in_trace']:,} allocations predate the trace (it starts mid-run)."
        )
    if s["preexisting_alive_throughout"]:
        notes.append(
            f"{s['preexisting_alive_throughout']:,} blocks were alive throughout the trace."
        )
    other = [d for d in ctx.snap.devices if d != ctx.dev.device]
    if other:
        notes.append(
            f"This report shows device {ctx.dev.device}; the snapshot also has device(s) {', '.join(map(str, other))} (use --device)."
        )
    notes += [f"note: {n}" for n in ctx.snap.format_notes] + [
        f"warning: {w}" for w in ctx.snap.warnings
    ]
    return figs + "".join(note(n) for n in notes)


# ---- timeline ---------------------------------------------------------------------------
def stage_bands(dev: DeviceTrace) -> list[StageBand]:
    """Annotation stages as event ranges, from the stages analysis (none if it is missing).

    Only the two outermost levels are drawn, at most MAX_STAGE_BANDS of them (a compiled
    model can have thousands of nested regions; they are all in the stages table)."""
    from memlens.views.report.analyses import stage_ranges

    try:
        ranges = stage_ranges(dev)
    except (SectionUnavailable, NotImplementedError):
        return []
    bands = [
        StageBand(int(f), int(last), str(label), int(depth))
        for f, last, label, depth in ranges
        if int(depth) < 2
    ]
    return bands[:MAX_STAGE_BANDS]


MAX_STAGE_BANDS = 400


def timeline_section(ctx: ReportContext, *, key: str = "a") -> str:
    dev = ctx.dev if key == "a" else ctx.dev2
    if dev is None or dev.n_events == 0:
        raise SectionUnavailable("this device has no trace entries: there is no timeline to draw")
    curves = downsample(dev)
    scale = make_scale(curves)
    stages: list[StageBand] = []
    try:
        stages = stage_bands(dev)
    except Exception as exc:  # a broken stage analysis must not take the timeline with it
        ctx.problems.append(f"timeline stage bands: {type(exc).__name__}: {exc}")
    bands = AllocationBands("", [], [])
    try:
        bands = allocation_bands(dev, scale, ctx.hide_patterns)
    except Exception as exc:  # nor a broken layout: the curves are drawn anyway
        ctx.problems.append(f"timeline allocation bands: {type(exc).__name__}: {exc}")
    svg_id = f"timeline-{key}"
    ctx.data.setdefault("timelines", []).append(
        {
            "svg": svg_id,
            "curves": curves.to_json(),
            "stages": [[b.first, b.last, b.label] for b in stages],
            "bands": bands.info,
            "bandSites": bands.sites,
        }
    )
    ctx.data["geometry"] = GEOMETRY
    legend = (
        '<div class="legend"><span><i class="l-active"></i>active (max per column)</span>'
        '<span><i class="l-active-min"></i>active (min per column)</span>'
        + ('<span><i class="l-bands"></i>largest allocations</span>' if bands.info else "")
        + '<span><i class="l-reserved"></i>reserved</span><span><i class="l-peak"></i>peak</span>'
        + ('<span><i class="l-stage"></i>annotated stage</span>' if stages else "")
        + "</div>"
    )
    binned = (
        ""
        if len(curves.start) == dev.n_events
        else f" Each column summarizes about {dev.n_events // len(curves.start):,} events."
    )
    svg = timeline_svg(curves, stages, svg_id=svg_id, scale=scale, allocation_bands=bands.svg)
    return (
        legend
        + svg
        + note(
            f"x: event index (0 to {dev.n_events - 1:,}); y: bytes.{binned} Hover for values; hover a band for its allocation."
        )
    )


# ---- peak -------------------------------------------------------------------------------
def peak_section(ctx: ReportContext) -> str:
    dev = ctx.dev
    rows = ctx.peak_rows
    total = int(dev.alloc_size[rows].sum()) if len(rows) else 0
    when = (
        f"after event {dev.peak_event_index:,}"
        if dev.peak_event_index >= 0
        else "before the first event"
    )
    ctx.data.setdefault("trees", {})["peak"] = peak_trees(dev)
    icicle = (
        '<div data-icicle="peak"><div class="controls">'
        '<button data-view="python">Python frames</button><button data-view="all">all frames</button>'
        '<button data-reset="1">reset zoom</button><span class="crumbs"></span></div>'
        '<div class="icicle-wrap"><div class="icicle"></div></div></div>'
        + note("Outermost frame at the top. Click a cell to zoom into it, click a breadcrumb to zoom out; "
               "hover for bytes. Nodes under 0.1% of the total are merged into \"<other>\".")
    )  # fmt: skip
    sites = top_sites(dev, rows, limit=25, hide_patterns=ctx.hide_patterns)
    return (
        note(
            f"{len(rows):,} allocations, {bytes_text(total)}, live at the peak of active memory ({when})."
        )
        + icicle
        + "<h3>Top call sites at the peak</h3>"
        + sites_table(sites, total)
        + (guarded(ctx, "Largest allocations", largest_allocations) or "")
    )


def largest_allocations(ctx: ReportContext) -> str:
    """The ten largest allocations live at the peak (memlens.analysis.peak)."""
    result = analysis("peak").peak(
        ctx.dev, tree=False, top=0, largest=10, hide_patterns=ctx.hide_patterns
    )
    rows = [
        [Cell(f"<code>{esc(a['address'])}_{int(a['version'])}</code>"), num(fmt_bytes(a["bytes"])),
         Cell(site_code(a["site"])),
         "before the trace" if a["alloc_event"] < 0 else f"{a['alloc_event']:,}",
         "alive at the end" if a.get("free_event") is None else f"{a['free_event']:,}"]
        for a in result.get("largest") or []
    ]  # fmt: skip
    return "<h3>Largest allocations at the peak</h3>" + table(
        [
            "allocation (address_version)",
            "bytes",
            "call site",
            "allocated at event",
            "freed at event",
        ],
        rows,
        numeric=(1,),
    )


# ---- allocator settings -----------------------------------------------------------------
def settings_section(ctx: ReportContext) -> str:
    settings = ctx.snap.allocator_settings
    if not settings:
        raise SectionUnavailable("this snapshot records no allocator settings (older PyTorch)")
    changed = notable_settings(settings)
    items = "".join(
        f"<dt>{esc(k)}{' *' if k in changed else ''}</dt><dd>{esc(v)}</dd>"
        for k, v in sorted(settings.items())
    )
    head = (
        note(
            "Settings that differ from the defaults are marked *: "
            + ", ".join(f"{k}={v}" for k, v in changed.items())
        )
        if changed
        else note("All allocator settings are at their defaults.")
    )
    return head + f'<dl class="kv">{items}</dl>'


# ---- devices ----------------------------------------------------------------------------
def has_several_devices(ctx: ReportContext) -> bool:
    return len(ctx.snap.devices) > 1


def devices_section(ctx: ReportContext) -> str:
    """Every device of the snapshot side by side, with the imbalance (memlens.analysis.ranks)."""
    devices = [d for d in ctx.snap.devices if d in ctx.snap.traces]
    labels = [f"device {d}" for d in devices]
    r = analysis("ranks").ranks(
        [(lab, ctx.snap.device(d)) for lab, d in zip(labels, devices)],
        limit=10,
        hide_patterns=ctx.hide_patterns,
    )
    rows = [
        [rk["label"] + (" (this report)" if rk["device"] == ctx.dev.device else ""), fmt_int(rk["trace_entries"]),
         num(fmt_bytes(rk["peak_active_bytes"])), num(fmt_bytes(rk["peak_reserved_bytes"])),
         num(fmt_bytes(rk["baseline_bytes"])), num(fmt_bytes(rk["end_active_bytes"]))]
        for rk in r.get("ranks") or []
    ]  # fmt: skip
    out = table(
        ["device", "trace entries", "peak active", "peak reserved", "baseline", "end active"],
        rows,
        numeric=(1, 2, 3, 4, 5),
    )
    imb = r.get("imbalance") or {}
    if imb:
        out += note(
            f"Peak active from {bytes_text(imb['peak_min_bytes'])} ({imb['min_label']}) to {bytes_text(imb['peak_max_bytes'])} "
            f"({imb['max_label']}): a spread of {bytes_text(imb['spread_bytes'])}, the largest {float(imb['max_over_mean']):.2f}x the mean."
        )
    sites = [s for s in r.get("sites") or [] if s.get("spread_bytes")]
    if sites:
        site_rows = [
            [
                Cell(site_code(s["site"])),
                *(num(fmt_bytes(b)) for b in s["bytes"]),
                num(fmt_bytes(s["spread_bytes"])),
            ]
            for s in sites
        ]
        out += "<h3>Call sites that differ between devices (at each one's peak)</h3>" + table(
            ["call site", *labels, "spread"], site_rows, numeric=tuple(range(1, len(labels) + 2))
        )
    return out


# ---- diff of two snapshots --------------------------------------------------------------
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


def _pct(figure: dict) -> str:
    p = figure.get("change_pct")
    if p is None:  # A was 0
        return "" if not figure.get("change") else "new"
    return f"{p:+.2f}%"


def diff_section(ctx: ReportContext) -> str:
    from memlens.views.report.context import guarded

    a_name, b_name = ctx.names
    parts = [
        note(f"A = {a_name} (device {ctx.dev.device}); B = {b_name} (device {ctx.dev2.device})."),
        guarded(ctx, "Diff", diff_tables),
        "<h3>Timeline of B</h3>",
        guarded(ctx, "Diff timeline", lambda c: timeline_section(c, key="b")),
    ]
    return "".join(p for p in parts if p)


def diff_tables(ctx: ReportContext) -> str:
    """The diff analysis: headline figures, per call site at each peak, stage by stage."""
    r = analysis("diff").diff(ctx.dev, ctx.dev2, limit=30, hide_patterns=ctx.hide_patterns)
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
        [Cell(site_code(s["site"])), num(fmt_bytes(s["a_bytes"])), num(fmt_bytes(s["b_bytes"])),
         num(fmt_delta(s["change"])), f"{fmt_int(s['a_count'])} \u2192 {fmt_int(s['b_count'])}", STATUS.get(s["status"], s["status"])]
        for s in sites
    ]  # fmt: skip
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
            [f"{st['name']}" + (f" #{st['occurrence']}" if st.get("occurrence") else ""),
             num(fmt_bytes(st.get("a_peak_bytes"))), num(fmt_bytes(st.get("b_peak_bytes"))), num(fmt_delta(st.get("peak_change"))),
             num(fmt_delta(st.get("a_net_bytes"))), num(fmt_delta(st.get("b_net_bytes"))), num(fmt_delta(st.get("net_change"))),
             STATUS.get(st.get("status"), st.get("status"))]
            for st in stages
        ]  # fmt: skip
        out += "<h3>Stage by stage</h3>" + table(
            ["stage", "A peak", "B peak", "peak change", "A net", "B net", "net change", ""],
            rows,
            numeric=(1, 2, 3, 4, 5, 6),
        )
    elif stages is None:
        out += note("Stage by stage: needs annotations in both snapshots.")
    return out

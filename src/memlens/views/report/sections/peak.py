"""At the peak: what is live at the peak of active memory, as an icicle, by call site and
the largest allocations (memlens.analysis.peak)."""

from __future__ import annotations

from memlens.analysis.peak import peak
from memlens.analysis.sites import top_sites
from memlens.views.report.context import ReportContext, Section, guarded
from memlens.views.report.icicle import peak_trees
from memlens.views.report.page import Cell, bytes_text, esc, fmt_bytes, note, num, site_code, table
from memlens.views.report.sections.common import sites_table


def peak_section(ctx: ReportContext) -> str:
    dev = ctx.dev
    rows = ctx.peak_rows
    total = int(dev.alloc_size[rows].sum()) if len(rows) else 0
    when = (
        f"after event {dev.peak_event_index:,}"
        if dev.peak_event_index >= 0
        else "before the first event"
    )
    ctx.data.setdefault("trees", {})["peak"] = peak_trees(dev, hide_patterns=ctx.hide_patterns)
    icicle = (
        '<div data-icicle="peak"><div class="controls">'
        '<button data-view="python">Python frames</button><button data-view="all">all frames</button>'
        '<button data-reset="1">reset zoom</button><span class="crumbs"></span></div>'
        '<div class="icicle-wrap"><div class="icicle"></div></div></div>'
        + note(
            "Outermost frame at the top. Click a cell to zoom into it, click a breadcrumb to zoom out; "
            'hover for bytes. Nodes under 0.1% of the total are merged into "<other>".'
        )
    )
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
    result = peak(ctx.dev, tree=False, top=0, largest=10, hide_patterns=ctx.hide_patterns)
    rows = [
        [
            Cell(f"<code>{esc(a['address'])}_{int(a['version'])}</code>"),
            num(fmt_bytes(a["bytes"])),
            Cell(site_code(a["site"])),
            "before the trace" if a["alloc_event"] < 0 else f"{a['alloc_event']:,}",
            "alive at the end" if a.get("free_event") is None else f"{a['free_event']:,}",
        ]
        for a in result.get("largest") or []
    ]
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


SECTION = Section("peak", "At the peak", peak_section)

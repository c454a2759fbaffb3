"""Out of memory: each OOM entry, what was live and why it failed
(memlens.analysis.oom); shown only when the trace has one."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memlens.analysis.oom import oom_report
from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import bytes_text, figures, fmt_bytes, fmt_int, note, num, table
from memlens.views.report.sections.common import event_text, site_cell


def has_oom(ctx: ReportContext) -> bool:
    return len(ctx.dev.events_of("oom")) > 0


def oom_section(ctx: ReportContext) -> str:
    r = oom_report(ctx.dev, top=10, hide_patterns=ctx.hide_patterns)
    parts = []
    for o in r.get("ooms") or []:
        parts.append(
            f"<h3>Out of memory at event {event_text(o['event'])}</h3>"
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
            )
            + _oom_notes(o)
            + "<h3>What was live: top sites</h3>"
            + _sites_table(o.get("top_sites") or [])
        )
    return "".join(parts) or note("No OOM entries.")


def _oom_notes(o: Mapping[str, Any]) -> str:
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


def _sites_table(sites: Sequence[Mapping[str, Any]]) -> str:
    rows = [[site_cell(s), num(fmt_bytes(s["bytes"])), fmt_int(s.get("count"))] for s in sites]
    return table(["call site", "bytes", "allocations"], rows, numeric=(1, 2))


SECTION = Section("oom", "Out of memory", oom_section, has_oom)

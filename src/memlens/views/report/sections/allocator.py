"""Allocator state: reserved, allocated and free memory and fragmentation at the peaks and
the end (memlens.analysis.allocator_state)."""

from __future__ import annotations

from memlens.analysis.allocator_state import fragmentation, state_at
from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import bytes_text, fmt_bytes, fmt_int, note, num, table
from memlens.views.report.sections.common import event_text


def allocator_state_section(ctx: ReportContext) -> str:
    dev = ctx.dev
    points = [("at the peak of active memory", dev.peak_event_index)]
    if dev.peak_reserved_event_index != dev.peak_event_index:
        points.append(("at the peak of reserved memory", dev.peak_reserved_event_index))
    if dev.n_events:
        points.append(("at the end", dev.n_events - 1))
    rows = []
    for label, ev in points:
        s = state_at(dev, ev, blocks=False)
        rows.append(
            [
                label,
                event_text(ev),
                num(fmt_bytes(s["reserved_bytes"])),
                num(fmt_bytes(s["allocated_bytes"])),
                num(fmt_bytes(s["free_bytes"])),
                num(fmt_bytes(s["largest_free_bytes"])),
                f"{100 * float(s['fragmentation']):.1f}%",
                fmt_int(s["n_segments"]),
                fmt_int(s["n_blocks"]),
            ]
        )
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
    frag = fragmentation(dev)
    if frag.get("max_gap_bytes") is not None:
        out += note(
            f"Reserved minus active is largest, {bytes_text(frag['max_gap_bytes'])}, after event {event_text(frag.get('max_gap_event'))}."
        )
    return out


SECTION = Section("allocator", "Allocator state", allocator_state_section)

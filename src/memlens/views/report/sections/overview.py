"""Overview: the headline figures of the device, and what to know about the trace."""

from __future__ import annotations

from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import bytes_text, figures, fmt_bytes, fmt_int, note


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


SECTION = Section("overview", "Overview", overview)

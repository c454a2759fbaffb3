"""Allocator settings: the snapshot's allocator configuration, changes from the defaults
marked."""

from __future__ import annotations

from memlens.analysis.summary import notable_settings
from memlens.views.report.context import ReportContext, Section, SectionUnavailable
from memlens.views.report.page import esc, note


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


SECTION = Section("settings", "Allocator settings", settings_section)

"""Pieces several sections share: call-site tables and cells, event text, and the group
tables and curves of categories and rules."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memlens.views.report.page import Cell, esc, fmt_bytes, fmt_int, num, site_code, table
from memlens.views.report.stacked import stacked_svg


def sites_table(sites: Sequence[Mapping[str, Any]], total: int | None = None) -> str:
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


def site_cell(s: Mapping[str, Any]) -> Cell:
    return Cell(site_code(s.get("site", "")))


def sites_cell(sites: Sequence[Mapping[str, Any]], key: str = "bytes") -> Cell:
    """A few sites in one cell: 'site (bytes)' per line."""
    lines = [f"{site_code(s.get('site', ''))} {fmt_bytes(s.get(key, 0))}" for s in sites]
    return Cell("<br>".join(lines))


def event_text(e: Any) -> str:
    return "before the first event" if e is None or int(e) < 0 else f"{int(e):,}"


def groups_table(
    kind: str, groups: Sequence[Mapping[str, Any]], total: int, *, pattern: bool = False
) -> str:
    """Categories and rules alike: per group, bytes and share at the peak, its own peak,
    what it allocated over the trace and its top sites (rules add their pattern)."""
    rows = [
        [g["name"]]
        + ([Cell(f"<code>{esc(g.get('pattern') or '')}</code>")] if pattern else [])
        + [
            num(fmt_bytes(g["bytes"])),
            f"{100 * g['bytes'] / total:.1f}%" if total else "",
            fmt_int(g["count"]),
            num(fmt_bytes(g["peak_bytes"])),
            num(fmt_bytes(g["allocated_bytes"])),
            sites_cell((g.get("top_sites") or [])[:3]),
        ]
        for g in groups
    ]
    first = 2 if pattern else 1
    return table(
        [kind]
        + (["pattern"] if pattern else [])
        + [
            "at the peak",
            "share",
            "allocations",
            "own peak",
            "allocated over the trace",
            "top sites",
        ],
        rows,
        numeric=range(first, first + 5),
    )


def curve_chart(curve: Mapping[str, Any] | None, names: list[str], n_events: int) -> str:
    if not curve or not curve.get("event"):
        return ""
    by_name = curve.get("bytes") or {}
    series = [(n, by_name[n]) for n in names if n in by_name and any(by_name[n])]
    if not series:
        return ""
    return "<h3>Over the trace</h3>" + stacked_svg(curve["event"], series, n_events)

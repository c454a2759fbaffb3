"""Devices: every device of the snapshot side by side, and the imbalance between them
(memlens.analysis.ranks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.ranks import ranks
from memlens.views.report.context import ReportContext, Section
from memlens.views.report.page import (
    Cell,
    bytes_text,
    fmt_bytes,
    fmt_int,
    note,
    num,
    site_code,
    table,
)


def has_several_devices(ctx: ReportContext) -> bool:
    return len(ctx.snap.devices) > 1


def devices_section(ctx: ReportContext) -> str:
    """Every device of the snapshot side by side, with the imbalance (memlens.analysis.ranks)."""
    devices = [d for d in ctx.snap.devices if d in ctx.snap.traces]
    labels = [f"device {d}" for d in devices]
    r = ranks(
        [(lab, ctx.snap.device(d)) for lab, d in zip(labels, devices)],
        top=10,
        hide_patterns=ctx.hide_patterns,
    )
    rows = [
        [
            rk["label"] + (" (this report)" if rk["device"] == ctx.dev.device else ""),
            fmt_int(rk["trace_entries"]),
            num(fmt_bytes(rk["peak_active_bytes"])),
            num(fmt_bytes(rk["peak_reserved_bytes"])),
            num(fmt_bytes(rk["baseline_bytes"])),
            num(fmt_bytes(rk["end_active_bytes"])),
        ]
        for rk in r.get("ranks") or []
    ]
    out = table(
        ["device", "trace entries", "peak active", "peak reserved", "baseline", "end active"],
        rows,
        numeric=(1, 2, 3, 4, 5),
    )
    imb: Mapping[str, Any] = r.get("imbalance") or {}
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


SECTION = Section("devices", "Devices", devices_section, has_several_devices)

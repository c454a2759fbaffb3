"""Text of `memlens anomalies`: late frees, large temporaries, reserved far above active."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import AnomaliesResult
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, sites_lines, when_text


def render_anomalies(r: AnomaliesResult, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    device, temp_events = r["device"], r["thresholds"]["temp_max_events"]
    lf, lt, rg = r["late_frees"], r["large_temporaries"], r["reserved_gaps"]
    lines = [
        f"device {device}",
        "",
        f"late frees (completed long after requested: another stream used the block): "
        f"{lf['count']:,}, {fb(lf['bytes'])}",
    ]
    for it in lf["items"]:
        d = f", {it['delay_us']:,} µs" if it["delay_us"] is not None else ""
        lines.append(
            f"  {fb(it['bytes']):>12}  {it['address']}_{it['version']}  "
            f"{it['delay_events']:,} events{d}  {it['site']}"
        )
    lines += [
        "",
        f"large short-lived temporaries (>= {fb(lt['min_bytes'])}, <= {temp_events} events): "
        f"{lt['count']:,}, {fb(lt['bytes'])} in total",
    ]
    lines += sites_lines(lt["by_site"])
    lines += [
        "",
        f"reserved far above active: {rg['count']:,} stretches; largest gap "
        f"{fb(rg['max_gap_bytes'])} {when_text(rg['max_gap_event'])}",
    ]
    for s in rg["stretches"]:
        lines.append(
            f"  events {s['first_event']:,}..{s['last_event']:,}: reserved {fb(s['reserved_bytes'])}, "
            f"active {fb(s['active_bytes'])} (gap {fb(s['max_gap_bytes'])})"
        )
    return "\n".join(lines)

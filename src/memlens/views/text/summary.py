"""Text of `memlens summary` (also printed by `memlens run` after a recording)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import PoolBytes, Summary
from memlens.units import format_bytes
from memlens.views.text.lines import NO_OPTIONS


def pool_text(p: Mapping[str, Any]) -> str:
    """`default 1.00 GiB`, `(1, 2) 300.00 MiB` (a CUDA graph's or a MemPool),
    `pool not recorded ...` (neither the trace nor the segments say)."""
    pool = p["pool"]
    name = (
        "pool not recorded"
        if pool is None
        else "default"
        if pool == [0, 0]
        else f"({pool[0]}, {pool[1]})"
    )
    return f"{name} {format_bytes(p['bytes'])}"


def pools_worth_a_line(pools: list[PoolBytes], private: list[list[int]]) -> bool:
    """Whether the pools at the peak say anything: a private pool among them, or bytes of
    no recorded pool in a snapshot that names a private pool (they may be its). The
    default pool alone, or with bytes of no recorded pool in a snapshot naming no private
    pool (a trace from before `pool_id`), is every trace's case: nothing to say."""
    if any(p["pool"] not in (None, [0, 0]) for p in pools):
        return True
    return bool(private) and any(p["pool"] is None for p in pools)


def render_summary(s: Summary, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    """The text of analysis.summary.summarize's result."""
    lines = [f"memlens summary of {s['source']}"]
    for d in s["devices"]:
        lines.append("")
        lines.append(
            f"device {d['device']}: {d['trace_entries']:,} trace entries, {d['allocations']:,} allocations"
        )
        if d["duration_s"] is not None:
            lines.append(f"  time span        {d['duration_s']:.3f} s")
        mid = []
        if d["truncated"]:
            mid.append("the trace is truncated (ring buffer full)")
        if d["starts_mid_run"]:
            mid.append(f"{d['preexisting_freed_in_trace']:,} allocations predate the trace")
        if d["preexisting_alive_throughout"]:
            mid.append(f"{d['preexisting_alive_throughout']:,} blocks alive throughout")
        if mid:
            lines.append("  window           " + "; ".join(mid))
        lines.append(
            f"  baseline         {format_bytes(d['baseline_bytes'])}  (alive before the first event)"
        )
        when = (
            f"at event {d['peak_event_index']:,}"
            if d["peak_event_index"] >= 0
            else "before the first event (the baseline)"
        )
        lines.append(f"  peak active      {format_bytes(d['peak_active_bytes'])}  {when}")
        lines.append(f"  end active       {format_bytes(d['end_active_bytes'])}")
        lines.append(
            f"  reserved         {format_bytes(d['reserved_start_bytes'])} at start, "
            f"peak {format_bytes(d['peak_reserved_bytes'])}, end {format_bytes(d['end_reserved_bytes'])}"
        )
        if d["annotations"]:
            lines.append(f"  annotations      {d['annotations']:,}")
        pools = d["pools_at_peak"]
        if pools_worth_a_line(pools, d["private_pools"]):
            lines.append("  pools at peak    " + "; ".join(map(pool_text, pools)))
        ooms = d["ooms"]
        for o in ooms[:3]:
            lines.append(
                f"  OOM              {format_bytes(o['requested_bytes'])} requested at event "
                f"{o['event']:,} with {format_bytes(o['device_free_bytes'])} free on the device"
            )
        if ooms:
            more = f"{len(ooms) - 3:,} more; " if len(ooms) > 3 else ""
            them = "it" if len(ooms) == 1 else "them"
            lines.append(f"                   ({more}`memlens oom` explains {them})")
        if d["top_sites"]:
            lines.append(f"  top call sites alive at the peak ({d['live_at_peak']:,} allocations):")
            for site in d["top_sites"]:
                lines.append(
                    f"    {format_bytes(site['bytes']):>12}  {site['count']:>6,}x  {site['site']}"
                )
    if s["allocator_settings"]:
        lines.append("")
        lines.append(
            "allocator settings: "
            + ", ".join(f"{k}={v}" for k, v in s["allocator_settings"].items())
        )
    for note in s["format_notes"]:
        lines.append(f"note: {note}")
    for w in s["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines)

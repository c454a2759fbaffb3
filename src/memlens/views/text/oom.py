"""Text of `memlens oom`: each out-of-memory entry explained."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import OomOutput
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, sites_lines


def verdict_text(o: Mapping[str, Any]) -> str:
    """The OOM's cause in words, with the figures that decide it."""
    req, free, unused = o["requested_bytes"], o["device_free_bytes"], o["reserved_unused_bytes"]
    seen = o["reserved_bytes"] + free
    if o["verdict"] == "stream_or_pool":
        return (
            f"a cached free block of {fb(o['largest_free_bytes'])} would hold it: it "
            "belongs to another stream or a private pool (CUDA graph)"
        )
    if o["verdict"] == "fragmentation":
        return (
            f"fragmentation: {fb(free)} free + {fb(unused)} cached and unused would hold "
            f"{fb(req)}, but no free block is that large; try "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        )
    if o["verdict"] == "another_process":
        return (
            f"another process: {fb(o['outside_bytes'])} of the device is held outside "
            f"this process (it reserves {fb(o['reserved_bytes'])}); without it "
            f"{fb(req)} would fit"
        )
    short = req - free - unused
    text = (
        f"device full: live tensors hold {fb(o['active_bytes'])}; {fb(req)} is "
        f"{fb(short)} more than is free or cached"
    )
    if o.get("outside_bytes") is None:
        text += (
            f" (this process sees {fb(seen)}: if the GPU is larger, another process "
            "holds the rest; --device-memory SIZE checks)"
        )
    return text


def render_oom(result: OomOutput, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    lines = []
    for r in result["devices"]:
        if not r["count"]:
            lines.append(f"device {r['device']}: no OOM in the trace")
            continue
        for o in r["ooms"]:
            lines += [
                f"device {r['device']}: OOM at event {o['event']:,}"
                + (f" (time_us {o['time_us']})" if o["time_us"] is not None else ""),
                f"  requested        {fb(o['requested_bytes'])}"
                + (f" at {o['site']}" if o["site"] else ""),
                f"  free on device   {fb(o['device_free_bytes'])} (reported by the driver)",
                f"  active           {fb(o['active_bytes'])} in {o['live_count']:,} allocations",
                f"  reserved         {fb(o['reserved_bytes'])} in {o['n_segments']:,} segments "
                f"({fb(o['reserved_unused_bytes'])} cached, not in use)",
                f"  largest free     {fb(o['largest_free_bytes'])} inside segments"
                + (
                    " (the request would fit: a different stream or pool?)"
                    if o["fits_in_a_free_block"]
                    else ""
                ),
                f"  verdict          {verdict_text(o)}",
                "  live at the OOM, by site:",
            ]
            lines += sites_lines(o["top_sites"], "    ")
    return "\n".join(lines)

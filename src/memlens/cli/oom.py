"""`memlens oom SNAP`: each out-of-memory entry: the request, the free memory reported,
what was live, fragmentation at that moment, and the top sites."""

from __future__ import annotations

import click

from memlens.cli.options import (
    device_option,
    emit_json,
    hide_option,
    hide_patterns,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
)


@click.command("oom")
@snapshot_argument
@click.option("--top", type=int, default=10, show_default=True, help="How many call sites to list.")
@device_option
@json_option
@no_cache_option
@hide_option
def command(snapshot: str, top: int, device: int | None, as_json: bool, no_cache: bool,
            hide: tuple[str, ...]) -> None:  # fmt: skip
    """Explain each OOM in the trace."""
    from memlens.analysis.oom import oom_report
    from memlens.analysis.text import sites_lines
    from memlens.units import format_bytes as fb

    snap = open_snapshot(snapshot, no_cache)
    devs = (
        [snap.device(device)]
        if device is not None
        else [snap.device(d) for d in snap.devices if d in snap.traces]
    )
    results = [oom_report(d, top=top, hide_patterns=hide_patterns(hide)) for d in devs]
    if as_json:
        emit_json({"source": snap.source, "devices": results})
        return
    lines = []
    for r in results:
        if not r["count"]:
            lines.append(f"device {r['device']}: no OOM in the trace")
            continue
        for o in r["ooms"]:
            lines += [
                f"device {r['device']}: OOM at event {o['event']:,}"
                + (f" (time_us {o['time_us']})" if o["time_us"] is not None else ""),
                f"  requested        {fb(o['requested_bytes'])}" + (f" at {o['site']}" if o["site"] else ""),
                f"  free on device   {fb(o['device_free_bytes'])} (reported by the driver)",
                f"  active           {fb(o['active_bytes'])} in {o['live_count']:,} allocations",
                f"  reserved         {fb(o['reserved_bytes'])} in {o['n_segments']:,} segments "
                f"({fb(o['reserved_unused_bytes'])} cached, not in use)",
                f"  largest free     {fb(o['largest_free_bytes'])} inside segments"
                + (" (the request would fit: a different stream or pool?)" if o["fits_in_a_free_block"] else ""),
                "  live at the OOM, by site:",
            ]  # fmt: skip
            lines += sites_lines(o["top_sites"], "    ")
    click.echo("\n".join(lines))

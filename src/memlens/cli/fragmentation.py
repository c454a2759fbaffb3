"""`memlens fragmentation SNAP [--event N]`: reserved minus active over time, free space and
the largest free block; with --event, the allocator state (segments and blocks) there."""

from __future__ import annotations

import click

from memlens.cli.options import (
    device_option,
    emit_json,
    json_option,
    no_cache_option,
    open_snapshot,
    points_option,
    snapshot_argument,
)


@click.command("fragmentation")
@snapshot_argument
@click.option("--event", "-e", type=int, default=None,
              help="Reconstruct segments and blocks after this event (-1: before the first).")  # fmt: skip
@click.option("--blocks/--no-blocks", default=True, show_default=True,
              help="With --event: list every segment and block (in --json; the text shows segments).")  # fmt: skip
@points_option(200)
@device_option
@json_option
@no_cache_option
def command(snapshot: str, event: int | None, blocks: bool, points: int, device: int | None,
            as_json: bool, no_cache: bool) -> None:  # fmt: skip
    """Allocator state and fragmentation (as PyTorch's Allocator State History, backwards
    from the exact final state)."""
    from memlens.analysis.allocator_state import fragmentation, state_at
    from memlens.analysis.text import table_lines, when_text
    from memlens.units import format_bytes as fb

    dev = open_snapshot(snapshot, no_cache).device(device)
    if event is not None:
        result = state_at(dev, event, blocks=blocks)
        if as_json:
            emit_json(result)
            return
        lines = _state_lines(result, when_text)
        if blocks:
            segs = sorted(result["segments"], key=lambda s: -s["size"])[:30]
            lines += ["", "largest segments:"]
            lines += table_lines(["segment", "size", "blocks", "free", "largest free", "expandable"],
                                 [[s["address"], fb(s["size"]), len(s["blocks"]), fb(s["free_bytes"]),
                                   fb(s["largest_free_bytes"]), "yes" if s["is_expandable"] else ""]
                                  for s in segs])  # fmt: skip
        click.echo("\n".join(lines))
        return
    result = fragmentation(dev, points=points)
    if as_json:
        emit_json(result)
        return
    lines = [f"device {dev.device}: reserved minus active peaks at {fb(result['max_gap_bytes'])} "
             f"{when_text(result['max_gap_event'])}"]  # fmt: skip
    for title, key in (("at the peak of active memory", "at_peak"), ("at the end", "end")):
        if result[key]:
            lines += ["", title + ":"] + _state_lines(result[key], when_text)[1:]
    click.echo("\n".join(lines))


def _state_lines(s: dict, when_text) -> list[str]:
    from memlens.units import format_bytes as fb

    return [
        f"device {s['device']} {when_text(s['event'])}:",
        f"  reserved       {fb(s['reserved_bytes'])} in {s['n_segments']:,} segments",
        f"  active         {fb(s['active_bytes'])} in {s['n_blocks']:,} blocks",
        f"  free           {fb(s['free_bytes'])} (inside segments, blocks rounded to 512 B)",
        f"  largest free   {fb(s['largest_free_bytes'])}",
        f"  fragmentation  {100 * s['fragmentation']:.1f}% (1 - largest free / free)",
    ]

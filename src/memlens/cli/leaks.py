"""`memlens leaks SNAP`: allocations left alive by repeated stages, and growth per step."""

from __future__ import annotations

import click

from memlens.cli.options import (
    annotations_option,
    device_option,
    emit_json,
    hide_option,
    hide_patterns,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
)


@click.command("leaks")
@snapshot_argument
@click.option(
    "--stage",
    default=None,
    help="Only stages whose name contains this text (one occurrence is enough).",
)
@click.option("--top", type=int, default=10, show_default=True, help="How many call sites to list.")
@device_option
@json_option
@no_cache_option
@annotations_option
@hide_option
def command(snapshot: str, stage: str | None, top: int, device: int | None, as_json: bool,
            no_cache: bool, annotation_files: tuple[str, ...], hide: tuple[str, ...]) -> None:  # fmt: skip
    """Leaks and growth: allocations made inside repeated stages (training steps) and still
    alive at the end, memory that grows from step to step, and the sites responsible."""
    from memlens.analysis.leaks import leaks
    from memlens.analysis.text import elide, fmt_delta, sites_lines, table_lines
    from memlens.units import format_bytes as fb

    dev = open_snapshot(snapshot, no_cache, annotation_files, device).device(device)
    result = leaks(dev, stage=stage, limit=top, hide_patterns=hide_patterns(hide))
    if as_json:
        emit_json(result)
        return
    lines = [f"device {dev.device}: {len(result['groups'])} stage group(s)"]
    lines += [f"note: {n}" for n in result["notes"]]
    for g in result["groups"]:
        lines += ["", f"{g['base_name']} x{g['count']}: growth {fmt_delta(g['growth_bytes'])} "
                      f"({fmt_delta(g['growth_per_step_bytes'])} per step"
                      + (f"; {fmt_delta(g['steady_growth_bytes'])} after the first" if g["steady_growth_bytes"] is not None else "")
                      + "); "
                      f"suspects {fb(g['suspects_bytes'])} in {g['suspects_count']:,} allocations"]  # fmt: skip
        occ = g["occurrences"]
        shown, hidden = elide(occ, 5, 3)
        rows = [[f"{o['name']} [{o['occurrence']}]", fb(o["start_bytes"]), fb(o["end_bytes"]),
                 fb(o["left_alive_bytes"])] for o in shown]  # fmt: skip
        if hidden:
            rows.insert(5, [f"... {hidden:,} more (--json)", "", "", ""])
        lines += table_lines(["occurrence", "start", "end", "left alive"], rows)
        if g["suspects"]:
            lines.append("  left alive in several occurrences (suspects), by site:")
            lines += sites_lines(g["suspects"], "    ")
        if g["first_only"]:
            lines.append(
                f"  left alive by the first occurrence only (one-time state, not a leak): {fb(g['first_only_bytes'])}"
            )
            lines += sites_lines(g["first_only"], "    ")
        if g["grew"]:
            lines.append("  grew from the first occurrence to the last, by site:")
            lines += sites_lines(g["grew"], "    ")
    click.echo("\n".join(lines))

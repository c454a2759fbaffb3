"""`memlens stages SNAP`: memory per annotated stage (record_function, optimizer steps,
ProfilerStep#N) and repeated stages compared step by step."""

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


@click.command("stages")
@snapshot_argument
@click.option("--name", default=None, help="Only stages whose name contains this text.")
@click.option("--top", type=int, default=3, show_default=True,
              help="Call sites that grew, per stage (0: skip, faster).")  # fmt: skip
@click.option(
    "--max-depth",
    type=int,
    default=None,
    help="Only stages nested at most this deep (0: top level).",
)
@device_option
@json_option
@no_cache_option
@annotations_option
@hide_option
def command(snapshot: str, name: str | None, top: int, max_depth: int | None, device: int | None,
            as_json: bool, no_cache: bool, annotation_files: tuple[str, ...], hide: tuple[str, ...]) -> None:  # fmt: skip
    """Per stage: memory at start and end, peak inside, bytes allocated and freed, and the
    call sites that grew; repeated stages compared step by step."""
    from memlens.analysis.stages import compare_steps, sites_that_grew, stage_table
    from memlens.analysis.text import elide, fmt_delta, sites_lines, table_lines
    from memlens.units import format_bytes as fb

    dev = open_snapshot(snapshot, no_cache, annotation_files, device).device(device)
    hide_re = hide_patterns(hide)
    # the text shows 40 stages: only those need their sites (the JSON has them all)
    table = stage_table(dev, name=name, top=top if as_json else 0, hide_patterns=hide_re)
    if max_depth is not None:
        table["stages"] = [s for s in table["stages"] if s["depth"] <= max_depth]
    steps = compare_steps(dev, table=table)
    if as_json:
        emit_json({**table, "repeated": steps["groups"]})
        return
    lines = [f"device {dev.device}: {len(table['stages'])} stages"]
    lines += [f"note: {n}" for n in table["notes"]]
    rows = []
    shown, hidden = elide(table["stages"], 40)
    if top > 0:
        for s in shown:
            s["grew"] = sites_that_grew(dev, s, top=top, hide_patterns=hide_re)
    for s in shown:
        label = "  " * s["depth"] + s["name"] + (f" [{s['occurrence']}]" if s["occurrence"] else "")
        ev = (
            f"{s['first_event']}..{s['last_event']}"
            if s["last_event"] >= s["first_event"]
            else "(no events)"
        )
        rows.append([label, ev, fb(s["active_start_bytes"]), fb(s["peak_bytes"]),
                     fb(s["active_end_bytes"]), fmt_delta(s["net_bytes"]),
                     fb(s["allocated_bytes"]), fb(s["freed_bytes"])])  # fmt: skip
    if rows:
        lines += table_lines(
            ["stage", "events", "start", "peak", "end", "net", "allocated", "freed"], rows
        )
    if hidden:
        lines.append(f"  ... {hidden:,} more stages (--name TEXT, --max-depth N or --json)")
    for s in [s for s in shown if s.get("grew")][:10]:
        if s.get("grew"):
            lines.append("")
            lines.append(
                f"sites that grew in {s['name']}"
                + (f" [{s['occurrence']}]" if s["occurrence"] else "")
                + ":"
            )
            lines += sites_lines(s["grew"])
    for g in steps["groups"]:
        lines.append("")
        lines.append(
            f"repeated: {g['base_name']} x{g['count']}  (end growth {fmt_delta(g['end_growth_bytes'])})"
        )
        steps_shown, steps_hidden = elide(g["steps"], 5, 3)
        srows = [[r["name"] + f" [{r['occurrence']}]", fb(r["peak_bytes"]),
                  "" if r["delta_peak_bytes"] is None else fmt_delta(r["delta_peak_bytes"]),
                  fb(r["active_end_bytes"]),
                  "" if r["delta_end_bytes"] is None else fmt_delta(r["delta_end_bytes"])]
                 for r in steps_shown]  # fmt: skip
        if steps_hidden:
            srows.insert(5, [f"... {steps_hidden:,} more (--json)", "", "", "", ""])
        lines += table_lines(["step", "peak", "Δpeak", "end", "Δend"], srows)
    click.echo("\n".join(lines))

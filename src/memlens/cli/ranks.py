"""`memlens ranks SNAP [SNAP...]`: peaks across the devices of one snapshot and across
several snapshot files (one per rank), imbalance, and the call sites that differ."""

from __future__ import annotations

import click

from memlens.cli.options import (
    emit_json,
    hide_option,
    hide_patterns,
    json_option,
    no_cache_option,
    open_snapshot,
)


@click.command("ranks")
@click.argument("snapshots", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--device", "-d", type=int, default=None, help="Only this device of each file (default: all)."
)
@click.option(
    "--top", type=int, default=15, show_default=True, help="How many differing sites to list."
)
@json_option
@no_cache_option
@hide_option
def command(snapshots: tuple[str, ...], device: int | None, top: int, as_json: bool, no_cache: bool,
            hide: tuple[str, ...]) -> None:  # fmt: skip
    """Compare devices / ranks: peak per rank, imbalance, sites that differ."""
    from memlens.analysis.ranks import ranks, traces_of
    from memlens.analysis.text import table_lines
    from memlens.errors import MemlensError
    from memlens.units import format_bytes as fb

    traces = traces_of([(p, open_snapshot(p, no_cache)) for p in snapshots], device)
    if not traces:
        raise MemlensError("no device with trace entries in the given snapshot(s)")
    r = ranks(traces, limit=top, hide_patterns=hide_patterns(hide))
    if as_json:
        emit_json(r)
        return
    lines = table_lines(["rank", "peak active", "peak reserved", "baseline", "end active", "entries"],
                        [[x["label"], fb(x["peak_active_bytes"]), fb(x["peak_reserved_bytes"]),
                          fb(x["baseline_bytes"]), fb(x["end_active_bytes"]), f"{x['trace_entries']:,}"]
                         for x in r["ranks"]], indent="")  # fmt: skip
    im = r["imbalance"]
    lines += ["", f"imbalance: max {fb(im['peak_max_bytes'])} ({im['max_label']}), min "
                  f"{fb(im['peak_min_bytes'])} ({im['min_label']}), spread {fb(im['spread_bytes'])}, "
                  f"max/mean {im['max_over_mean']:.3f}"]  # fmt: skip
    if r["sites"]:
        lines += ["", "sites that differ at each rank's peak:"]
        lines += table_lines(["site", *[f"#{i}" for i in range(len(r["ranks"]))], "spread"],
                             [[s["site"][:90], *[fb(b) for b in s["bytes"]], fb(s["spread_bytes"])]
                              for s in r["sites"]])  # fmt: skip
    click.echo("\n".join(lines))

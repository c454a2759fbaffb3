"""`memlens anomalies SNAP`: late frees (cross-stream use), large short-lived temporaries,
reserved memory far above active memory."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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

# (option, type, default, help): the thresholds of each kind of anomaly
THRESHOLDS: list[tuple[str, type, object, str]] = [
    ("--late-events", int, 2,
     "A free is late when completed at least this many events after its request..."),
    ("--late-us", int, 0, "...and this many µs (timed traces)."),
    ("--temp-min", str, "64MiB", "Smallest temporary worth reporting."),
    ("--temp-events", int, 8, "Longest lifetime (events) of a temporary."),
    ("--gap-min", str, "1GiB", "Reserved minus active worth reporting..."),
    ("--gap-ratio", float, 0.5, "...and above this fraction of active."),
]  # fmt: skip


def threshold_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for name, kind, default, text in reversed(THRESHOLDS):
        f = click.option(name, type=kind, default=default, show_default=True, help=text)(f)
    return f


@click.command("anomalies")
@snapshot_argument
@threshold_options
@click.option("--top", type=int, default=10, show_default=True, help="Items listed per kind.")
@device_option
@json_option
@no_cache_option
@hide_option
def command(snapshot: str, late_events: int, late_us: int, temp_min: str, temp_events: int,
            gap_min: str, gap_ratio: float, top: int, device: int | None, as_json: bool,
            no_cache: bool, hide: tuple[str, ...]) -> None:  # fmt: skip
    """Things worth a second look in a trace."""
    from memlens.analysis.anomalies import anomalies
    from memlens.analysis.text import sites_lines, when_text
    from memlens.units import format_bytes as fb
    from memlens.units import parse_bytes

    dev = open_snapshot(snapshot, no_cache).device(device)
    r = anomalies(dev, late_min_events=late_events, late_min_us=late_us,
                  temp_min_bytes=parse_bytes(temp_min), temp_max_events=temp_events,
                  gap_min_bytes=parse_bytes(gap_min), gap_ratio=gap_ratio, limit=top,
                  hide_patterns=hide_patterns(hide))  # fmt: skip
    if as_json:
        emit_json(r)
        return
    lf, lt, rg = r["late_frees"], r["large_temporaries"], r["reserved_gaps"]
    lines = [f"device {dev.device}", "",
             f"late frees (completed long after requested: another stream used the block): "
             f"{lf['count']:,}, {fb(lf['bytes'])}"]  # fmt: skip
    for it in lf["items"]:
        d = f", {it['delay_us']:,} µs" if it["delay_us"] is not None else ""
        lines.append(
            f"  {fb(it['bytes']):>12}  {it['address']}_{it['version']}  {it['delay_events']:,} events{d}  {it['site']}"
        )
    lines += ["", f"large short-lived temporaries (>= {fb(lt['min_bytes'])}, <= {temp_events} events): "
                  f"{lt['count']:,}, {fb(lt['bytes'])} in total"]  # fmt: skip
    lines += sites_lines(lt["by_site"])
    lines += ["", f"reserved far above active: {rg['count']:,} stretches; largest gap "
                  f"{fb(rg['max_gap_bytes'])} {when_text(rg['max_gap_event'])}"]  # fmt: skip
    for s in rg["stretches"]:
        lines.append(f"  events {s['first_event']:,}..{s['last_event']:,}: reserved {fb(s['reserved_bytes'])}, "
                     f"active {fb(s['active_bytes'])} (gap {fb(s['max_gap_bytes'])})")  # fmt: skip
    click.echo("\n".join(lines))

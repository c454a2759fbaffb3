"""`memlens check SNAP --max-peak 12GiB [--max-reserved X] [--baseline OLD --max-growth 5%]`:
a memory budget for CI. Exit 0 within budget, 1 when a budget is broken, 2 on bad input."""

from __future__ import annotations

import sys

import click

from memlens.cli.options import (
    emit_json,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
)


@click.command("check")
@snapshot_argument
@click.option(
    "--max-peak", default=None, metavar="SIZE", help="Budget for peak active memory (e.g. 12GiB)."
)
@click.option(
    "--max-reserved", default=None, metavar="SIZE", help="Budget for peak reserved memory."
)
@click.option("--baseline", type=click.Path(dir_okay=False), default=None,
              help="An older snapshot to compare the peak with.")  # fmt: skip
@click.option("--max-growth", default=None, metavar="PCT|SIZE",
              help="Allowed growth of the peak over --baseline: 5% or 512MiB (default with --baseline: 0).")  # fmt: skip
@click.option(
    "--device", "-d", type=int, default=None, help="Device to check (default: every device)."
)
@json_option
@no_cache_option
def command(snapshot: str, max_peak: str | None, max_reserved: str | None,
            baseline: str | None, max_growth: str | None, device: int | None, as_json: bool,
            no_cache: bool) -> None:  # fmt: skip
    """Check memory budgets; exit 1 with a clear message when one is broken."""
    from memlens.analysis.budget import check_budgets, parse_growth
    from memlens.errors import MemlensError
    from memlens.units import parse_bytes

    # the specific complaint first: --max-growth alone is "nothing to check" too
    if max_growth is not None and baseline is None:
        raise MemlensError("--max-growth needs --baseline OLD.pickle")
    if max_peak is None and max_reserved is None and baseline is None:
        raise MemlensError("nothing to check: give --max-peak, --max-reserved or --baseline")
    peak_b = parse_bytes(max_peak) if max_peak is not None else None
    res_b = parse_bytes(max_reserved) if max_reserved is not None else None
    frac, grow_b = parse_growth(max_growth) if max_growth is not None else (None, None)
    snap = open_snapshot(snapshot, no_cache)
    base_snap = open_snapshot(baseline, no_cache) if baseline else None
    devices = [device] if device is not None else [d for d in snap.devices if d in snap.traces]
    if not devices:
        raise MemlensError(f"{snapshot} has no device traces to check")
    results = []
    for d in devices:
        dev = snap.device(d)
        base_dev = None
        if base_snap is not None:
            base_dev = base_snap.device(d if d in base_snap.traces else None)
        results.append(check_budgets(dev, max_peak=peak_b, max_reserved=res_b, baseline=base_dev,
                                     max_growth=frac, max_growth_bytes=grow_b))  # fmt: skip
    ok = all(r["ok"] for r in results)
    if as_json:
        emit_json({"ok": ok, "source": snap.source, "devices": results})
    else:
        for r in results:
            for c in r["checks"]:
                click.echo(("ok:   " if c["ok"] else "FAIL: ") + c["message"], err=not c["ok"])
        click.echo("memlens check: " + ("all budgets met" if ok else "budget exceeded"), err=not ok)
    if not ok:
        # not ctx.exit(1): memlens.cli.main runs click with standalone_mode=False, where
        # click returns (and main drops) the exit code of a click Exit
        sys.exit(1)

"""`memlens check SNAP --max-peak 12GiB [--max-reserved X] [--baseline OLD --max-growth 5%]`:
a memory budget for CI. Exit 0 within budget, 1 when a budget is broken, 2 on bad input."""

from __future__ import annotations

from typing import Any

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import open_snapshot
from memlens.snapshot.model import Snapshot


def _budgets(max_peak: str | None, max_reserved: str | None, baseline: str | None,
             max_growth: str | None) -> dict[str, Any]:  # fmt: skip
    """The budgets in bytes (and growth as a fraction), checked before any load."""
    from memlens.analysis.budget import parse_growth
    from memlens.errors import MemlensError
    from memlens.units import parse_bytes

    # the specific complaint first: --max-growth alone is "nothing to check" too
    if max_growth is not None and baseline is None:
        raise MemlensError("--max-growth needs --baseline OLD.pickle")
    if max_peak is None and max_reserved is None and baseline is None:
        raise MemlensError("nothing to check: give --max-peak, --max-reserved or --baseline")
    frac, grow_b = parse_growth(max_growth) if max_growth is not None else (None, None)
    return {
        "max_peak": parse_bytes(max_peak) if max_peak is not None else None,
        "max_reserved": parse_bytes(max_reserved) if max_reserved is not None else None,
        "baseline": baseline,
        "max_growth": frac,
        "max_growth_bytes": grow_b,
    }


@analysis_command(
    "check",
    click.option("--max-peak", default=None, metavar="SIZE",
                 help="Budget for peak active memory (e.g. 12GiB)."),
    click.option("--max-reserved", default=None, metavar="SIZE",
                 help="Budget for peak reserved memory."),
    click.option("--baseline", type=click.Path(dir_okay=False), default=None,
                 help="An older snapshot to compare the peak with."),
    click.option("--max-growth", default=None, metavar="PCT|SIZE",
                 help="Allowed growth of the peak over --baseline: 5% or 512MiB (default with --baseline: 0)."),
    opens="snapshot",
    device_help="Device to check (default: every device with a trace).",
    hide=False,
    prepare=_budgets,
)  # fmt: skip
def command(snap: Snapshot, max_peak: int | None, max_reserved: int | None,
            baseline: str | None, max_growth: float | None, max_growth_bytes: int | None,
            device: int | None, no_cache: bool, paths: str) -> Answer:  # fmt: skip
    """Check memory budgets; exit 1 with a clear message when one is broken."""
    from memlens.analysis.budget import check_budgets
    from memlens.errors import MemlensError
    from memlens.views.text.check import render_check

    base_snap = open_snapshot(baseline, no_cache) if baseline else None
    devices = [device] if device is not None else [d for d in snap.devices if d in snap.traces]
    if not devices:
        raise MemlensError(f"{paths} has no device traces to check")
    results = []
    for d in devices:
        base_dev = None
        if base_snap is not None:
            base_dev = base_snap.device(d if d in base_snap.traces else None)
        results.append(check_budgets(snap.device(d), max_peak=max_peak, max_reserved=max_reserved,
                                     baseline=base_dev, max_growth=max_growth,
                                     max_growth_bytes=max_growth_bytes))  # fmt: skip
    ok = all(r["ok"] for r in results)
    result = {"ok": ok, "source": snap.source, "devices": results}
    return Answer(result, render_check, exit_code=0 if ok else 1)

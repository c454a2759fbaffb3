"""Budgets for CI (`memlens check`): peak active and reserved limits, growth against a
baseline snapshot."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from memlens.analysis.devices import traced_devices
from memlens.analysis.results import BudgetCheck, BudgetResult, CheckOutput
from memlens.errors import MemlensError
from memlens.snapshot.model import DeviceTrace, Snapshot
from memlens.units import format_bytes, parse_bytes


def parse_growth(text: str) -> tuple[float | None, int | None]:
    """'5%' -> (0.05, None); '0.05' -> (0.05, None); '512MiB' -> (None, 536870912)."""
    t = str(text).strip()
    m = re.fullmatch(r"\+?([0-9]*\.?[0-9]+)\s*%", t)
    if m:
        return float(m.group(1)) / 100.0, None
    try:
        v = float(t)
    except ValueError:
        return None, parse_bytes(t.lstrip("+"))
    if v < 0:
        raise MemlensError(f"--max-growth must not be negative: {text!r}")
    return v, None


@dataclass(frozen=True)
class Budgets:
    """What `memlens check` checks a trace against, in bytes: its peak active and peak
    reserved memory, and the growth of its peak over a baseline's, a fraction (0.05 = 5%)
    of the baseline's peak and/or an absolute allowance (with both, the larger applies;
    with a baseline and neither, no growth at all)."""

    max_peak: int | None = None
    max_reserved: int | None = None
    max_growth: float | None = None
    max_growth_bytes: int | None = None

    @classmethod
    def parse(
        cls, max_peak: str | int | None, max_reserved: str | int | None, max_growth: str | None
    ) -> Budgets:
        """From the options as written: sizes ("12GiB") or bytes; growth as "5%", "0.05"
        or "512MiB"."""
        frac, grow_b = parse_growth(max_growth) if max_growth is not None else (None, None)
        peak = parse_bytes(max_peak) if max_peak is not None else None
        reserved = parse_bytes(max_reserved) if max_reserved is not None else None
        return cls(peak, reserved, frac, grow_b)


def check_budgets(
    dev: DeviceTrace, budgets: Budgets, baseline: DeviceTrace | None = None
) -> BudgetResult:
    """Returns {"ok": bool, "device", "source", "peak_active_bytes", "peak_reserved_bytes",
    "checks": [{"name" ("max_peak"|"max_reserved"|"max_growth"), "ok", "value", "limit",
    "message"}], "violations": [message...]}. Growth needs `baseline`."""
    max_peak, max_reserved = budgets.max_peak, budgets.max_reserved
    max_growth, max_growth_bytes = budgets.max_growth, budgets.max_growth_bytes
    checks: list[BudgetCheck] = []
    peak, reserved = dev.peak_active_bytes, dev.peak_reserved_bytes
    where = f"device {dev.device}"

    def add(name: Literal["max_peak", "max_reserved"], value: int, limit: int, what: str) -> None:
        ok = value <= limit
        msg = (
            f"{where}: {what} {format_bytes(value)} ({value:,} bytes) "
            + ("is within" if ok else "exceeds")
            + f" the budget of {format_bytes(limit)} ({limit:,} bytes)"
        )
        if not ok:
            msg += f" by {format_bytes(value - limit)}"
        checks.append({"name": name, "ok": ok, "value": value, "limit": limit, "message": msg})

    if max_peak is not None:
        add("max_peak", peak, int(max_peak), "peak active memory")
    if max_reserved is not None:
        add("max_reserved", reserved, int(max_reserved), "peak reserved memory")
    if baseline is not None:
        base = baseline.peak_active_bytes
        allowed = 0
        if max_growth is not None:
            allowed = max(allowed, int(base * max_growth))
        if max_growth_bytes is not None:
            allowed = max(allowed, int(max_growth_bytes))
        growth = peak - base
        limit = base + allowed
        ok = peak <= limit
        pct = f"{100.0 * growth / base:+.2f}%" if base else "n/a"
        msg = (
            f"{where}: peak active memory {format_bytes(peak)} vs baseline {format_bytes(base)}: "
            f"{'+' if growth >= 0 else ''}{format_bytes(growth)} ({pct}); "
            + ("within" if ok else "exceeds")
            + f" the allowed growth of {format_bytes(allowed)}"
            + (f" ({100 * max_growth:g}%)" if max_growth is not None else "")
        )
        checks.append(
            {
                "name": "max_growth",
                "ok": ok,
                "value": peak,
                "limit": limit,
                "message": msg,
                "baseline_bytes": base,
                "growth_bytes": growth,
            }
        )
    elif max_growth is not None or max_growth_bytes is not None:
        raise MemlensError("--max-growth needs --baseline OLD.pickle")
    violations = [c["message"] for c in checks if not c["ok"]]
    return {
        "ok": not violations,
        "device": dev.device,
        "source": dev.snapshot.source,
        "peak_active_bytes": peak,
        "peak_reserved_bytes": reserved,
        "checks": checks,
        "violations": violations,
    }


def check_budget_options(options: Mapping[str, Any]) -> None:
    """`memlens check`'s options, checked before any snapshot is read: a budget to check,
    sizes and growth that parse."""
    # the specific complaint first: --max-growth alone is "nothing to check" too
    if options["max_growth"] is not None and options["baseline"] is None:
        raise MemlensError("--max-growth needs --baseline OLD.pickle")
    if (
        options["max_peak"] is None
        and options["max_reserved"] is None
        and options["baseline"] is None
    ):
        raise MemlensError("nothing to check: give --max-peak, --max-reserved or --baseline")
    Budgets.parse(options["max_peak"], options["max_reserved"], options["max_growth"])


def check_output(
    snap: Snapshot,
    *,
    max_peak: str | int | None = None,
    max_reserved: str | int | None = None,
    baseline: Snapshot | None = None,
    max_growth: str | None = None,
    device: int | None = None,
) -> CheckOutput:
    """`memlens check`: check_budgets on `device`, or on every device with a trace, each
    against the baseline's same device (its longest trace when it lacks that one). Sizes
    as written ("12GiB") or bytes; max_growth as "5%", "0.05" or "512MiB"."""
    budgets = Budgets.parse(max_peak, max_reserved, max_growth)
    devices = traced_devices(snap, device)
    if not devices:
        raise MemlensError(f"{snap.source} has no device traces to check")
    results = []
    for d in devices:
        base_dev = None
        if baseline is not None:
            base_dev = baseline.device(d if d in baseline.traces else None)
        results.append(check_budgets(snap.device(d), budgets, base_dev))
    return {"ok": all(r["ok"] for r in results), "source": snap.source, "devices": results}

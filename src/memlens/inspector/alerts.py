"""Alerts raised while training: each rule fires at most once per tracked tensor."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

GRAD_KINDS = ("grad_output", "grad_input", "grad")


@dataclass
class AlertConfig:
    """Thresholds. ``None`` turns a rule off.

    - ``explode_ratio``: norm above this multiple of the tensor's first non-zero norm.
    - ``explode_rms``: root-mean-square (norm / sqrt(numel)) above this.
    - ``vanish_ratio``: gradient norm below this fraction of its first non-zero norm.
    - ``vanish_rms``: gradient root-mean-square below this (an all-zero gradient included).
    - ``dead_fraction``: a module output with at least this fraction of exact zeros.
    """

    explode_ratio: float | None = 1e3
    explode_rms: float | None = 1e4
    vanish_ratio: float | None = 1e-3
    vanish_rms: float | None = 1e-10
    dead_fraction: float | None = 0.99
    dead_min_numel: int = 16


class AlertChecker:
    """Every alert is recorded once per (tensor, rule); :meth:`should_print` keeps the terminal
    readable when one fault spreads (a NaN reaches every later module): one line per
    (module, rule), at most ``PRINT_LIMIT`` per rule, then a pointer to alerts.jsonl."""

    PRINT_LIMIT = 10

    def __init__(self, config: AlertConfig | None = None):
        self.config = config or AlertConfig()
        self._fired: set[tuple[str, str]] = set()
        self._baseline: dict[str, float] = {}
        self._printed: set[tuple[str, str]] = set()
        self._printed_per_rule: dict[str, int] = {}

    def should_print(self, a: dict[str, Any]) -> str | None:
        """The line to print for alert ``a``, or None."""
        if (a["module"], a["rule"]) in self._printed:
            return None
        self._printed.add((a["module"], a["rule"]))
        n = self._printed_per_rule.get(a["rule"], 0)
        self._printed_per_rule[a["rule"]] = n + 1
        if n < self.PRINT_LIMIT:
            return format_alert(a)
        if n == self.PRINT_LIMIT:
            return f"memlens inspect: more '{a['rule']}' alerts are in alerts.jsonl"
        return None

    def check(
        self, key: str, module: str, kind: str, step: int, numel: int, s: dict[str, Any]
    ) -> list[dict[str, Any]]:
        c = self.config
        found: list[tuple[str, str]] = []
        if s["nan"] > 0:
            found.append(("nan", f"{int(s['nan'])} NaN value(s) of {numel}"))
        if s["inf"] > 0:
            found.append(("inf", f"{int(s['inf'])} Inf value(s) of {numel}"))
        norm = s["norm"]
        rms = norm / math.sqrt(numel) if numel else 0.0
        base = self._baseline.get(key)
        if base is None and math.isfinite(norm) and norm > 0:
            self._baseline[key] = base = norm
        if math.isfinite(norm) and s["nan"] == 0 and s["inf"] == 0:
            if c.explode_ratio is not None and base and norm > c.explode_ratio * base:
                found.append(
                    ("exploding", f"norm {norm:.3g} is {norm / base:.3g}x its first value")
                )
            elif c.explode_rms is not None and rms > c.explode_rms:
                found.append(("exploding", f"norm {norm:.3g} (rms {rms:.3g})"))
            if kind in GRAD_KINDS:
                if c.vanish_rms is not None and rms < c.vanish_rms:
                    found.append(("vanishing", f"gradient norm {norm:.3g} (rms {rms:.3g})"))
                elif c.vanish_ratio is not None and base and norm < c.vanish_ratio * base:
                    found.append(
                        (
                            "vanishing",
                            f"gradient norm {norm:.3g} is {norm / base:.3g}x its first value",
                        )
                    )
        if (
            kind == "output"
            and c.dead_fraction is not None
            and numel >= c.dead_min_numel
            and s["frac_zeros"] >= c.dead_fraction
        ):
            found.append(("dead", f"{100 * s['frac_zeros']:.1f}% of the output is exactly zero"))
        out = []
        for rule, detail in found:
            if (key, rule) in self._fired:
                continue
            self._fired.add((key, rule))
            out.append(
                {
                    "rule": rule,
                    "key": key,
                    "module": module,
                    "kind": kind,
                    "step": step,
                    "detail": detail,
                }
            )
        return out


def format_alert(a: dict[str, Any]) -> str:
    names = {
        "nan": "NaN",
        "inf": "Inf",
        "exploding": "exploding norm",
        "vanishing": "vanishing gradient",
        "dead": "dead activations",
    }
    return (
        f"memlens inspect: alert: {names.get(a['rule'], a['rule'])} in module "
        f"'{a['module'] or '(root)'}' ({a['key']}) at step {a['step']}: {a['detail']}"
    )

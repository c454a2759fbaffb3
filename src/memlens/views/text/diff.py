"""Text of `memlens diff`: the headline figures, the call sites, and stage by stage."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import DiffResult
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, signed_bytes, table_lines

_STATUS = {"both": "", "only_a": "only in A", "only_b": "only in B"}


def _value(name: str, x: int) -> str:
    return f"{x:,}" if name == "trace_entries" else fb(x)


def _change(name: str, x: int) -> str:
    return f"{x:+,}" if name == "trace_entries" else signed_bytes(x)


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.2f}%"


def _bytes(x: int | None) -> str:
    return "" if x is None else fb(x)


def _signed(x: int | None) -> str:
    return "" if x is None else signed_bytes(x)


def render_diff(result: DiffResult, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    """A and B named by options["paths"] (the paths as given), else by their source."""
    paths = options.get("paths") or (result["a"]["source"], result["b"]["source"])
    a, b = (paths[0], result["a"]["device"]), (paths[1], result["b"]["device"])
    lines = [f"A = {a[0]} (device {a[1]})", f"B = {b[0]} (device {b[1]})", ""]
    lines += table_lines(
        ["", "A", "B", "change", "%"],
        [
            [
                f["name"],
                _value(f["name"], f["a"]),
                _value(f["name"], f["b"]),
                _change(f["name"], f["change"]),
                _pct(f["change_pct"]),
            ]
            for f in result["figures"]
        ],
    )
    lines += ["", f"call sites at each peak ({result['sites_total']} sites, largest change first):"]
    lines += table_lines(
        ["site", "A", "B", "change", ""],
        [
            [
                s["site"],
                fb(s["a_bytes"]),
                fb(s["b_bytes"]),
                signed_bytes(s["change"]),
                _STATUS[s["status"]],
            ]
            for s in result["sites"]
        ],
    )
    if result["stages"]:
        lines += ["", "stage by stage (peak inside, and net = end - start):"]
        lines += table_lines(
            ["stage", "A peak", "B peak", "change", "A net", "B net", "change"],
            [
                [
                    s["name"] + (f" [{s['occurrence']}]" if s["occurrence"] else ""),
                    _bytes(s["a_peak_bytes"]),
                    _bytes(s["b_peak_bytes"]),
                    _signed(s["peak_change"]),
                    _signed(s["a_net_bytes"]),
                    _signed(s["b_net_bytes"]),
                    _signed(s["net_change"]),
                ]
                for s in result["stages"]
            ],
        )
    return "\n".join(lines)

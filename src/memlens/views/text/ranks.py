"""Text of `memlens ranks`: peak per rank, the imbalance, the sites that differ."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from memlens.analysis.results import RanksResult
from memlens.units import format_bytes as fb
from memlens.views.text.lines import NO_OPTIONS, table_lines


def render_ranks(r: RanksResult, options: Mapping[str, Any] = NO_OPTIONS) -> str:
    lines = table_lines(
        ["rank", "peak active", "peak reserved", "baseline", "end active", "entries"],
        [
            [
                x["label"],
                fb(x["peak_active_bytes"]),
                fb(x["peak_reserved_bytes"]),
                fb(x["baseline_bytes"]),
                fb(x["end_active_bytes"]),
                f"{x['trace_entries']:,}",
            ]
            for x in r["ranks"]
        ],
        indent="",
    )
    im = r["imbalance"]
    assert im is not None  # None only without traces, which ranks_output refuses
    lines += [
        "",
        f"imbalance: max {fb(im['peak_max_bytes'])} ({im['max_label']}), min "
        f"{fb(im['peak_min_bytes'])} ({im['min_label']}), spread {fb(im['spread_bytes'])}, "
        f"max/mean {im['max_over_mean']:.3f}",
    ]
    if r["sites"]:
        lines += ["", "sites that differ at each rank's peak:"]
        lines += table_lines(
            ["site", *[f"#{i}" for i in range(len(r["ranks"]))], "spread"],
            [
                [s["site"][:90], *[fb(b) for b in s["bytes"]], fb(s["spread_bytes"])]
                for s in r["sites"]
            ],
        )
    return "\n".join(lines)

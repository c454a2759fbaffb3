"""A small stacked-area chart (bytes per group over events) for categories and rules.

The groups' curves come sampled from the analyses (memlens.analysis.curves); they are
stacked in the given order, each a filled step area, drawn in the timeline's geometry.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.units import format_bytes
from memlens.views.report.page import esc
from memlens.views.report.timeline import (
    HEIGHT,
    LEFT,
    PLOT_H,
    RIGHT,
    TOP,
    WIDTH,
    Scale,
    nice_byte_step,
    nice_count_step,
)

N_COLORS = 8


def stacked_svg(
    events: Sequence[int], series: Sequence[tuple[str, Sequence[int]]], n_events: int
) -> str:
    """SVG of `series` ((name, bytes at each of `events`)) stacked bottom-up, plus a legend."""
    ev = np.asarray(events, dtype=np.int64)
    if len(ev) == 0 or not series:
        return ""
    values = np.asarray([list(v) for _, v in series], dtype=np.int64).reshape(len(series), len(ev))
    tops = np.cumsum(values, axis=0)
    top = float(max(int(tops[-1].max(initial=0)), 1))
    step = nice_byte_step(top * 1.05)
    scale = Scale(n_events, max(top * 1.05, step))
    # each sample holds from its event to the next sample's
    xs = [scale.x(float(e)) for e in ev.tolist()] + [scale.x(float(n_events))]
    out = [
        f'<svg class="timeline stacked" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="bytes per group over events" xmlns="http://www.w3.org/2000/svg">'
    ]
    v = 0
    while v <= scale.y_max:
        y = scale.y(v)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        out.append(
            f'<text class="ylab" x="{LEFT - 6}" y="{y + 4:.1f}">{esc(format_bytes(v, 1))}</text>'
        )
        v += step
    for e in range(0, n_events + 1, nice_count_step(max(n_events, 1))):
        x = scale.x(e)
        anchor = ' style="text-anchor:end"' if x > WIDTH - RIGHT - 20 else ""
        out.append(f'<text class="xlab" x="{x:.1f}" y="{HEIGHT - 8}"{anchor}>{e:,}</text>')
    for g in range(
        len(series) - 1, -1, -1
    ):  # drawn top group first, each from 0 up to its cumulative top
        ys = [scale.y(float(t)) for t in tops[g].tolist()]
        d = [f"M{xs[0]:.1f} {scale.y(0):.1f}"]
        d += [f"V{y:.1f}H{xs[k + 1]:.1f}" for k, y in enumerate(ys)]
        d.append(f"V{scale.y(0):.1f}Z")
        out.append(
            f'<path class="alloc-band ab{g % N_COLORS}" d="{"".join(d)}"><title>{esc(series[g][0])}</title></path>'
        )
    out.append(
        f'<line class="xtick" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + PLOT_H}" y2="{TOP + PLOT_H}"/>'
    )
    out.append("</svg>")
    legend = "".join(
        f'<span><i class="sw ab{g % N_COLORS}"></i>{esc(name)}</span>'
        for g, (name, _) in enumerate(series)
    )
    return f'<div class="legend">{legend}</div>' + "".join(out)

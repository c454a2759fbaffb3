"""The memory timeline: active and reserved curves, downsampled server-side, drawn as SVG.

A million events cannot go into a file meant for a bug report, so each curve is reduced to
at most `bins` columns keeping the minimum and the maximum of every column (min/max per
pixel): the peak is always exactly visible, and the file size does not grow with the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlens.snapshot.model import DeviceTrace
from memlens.units import format_bytes
from memlens.views.report.page import esc

DEFAULT_BINS = 1000

# SVG geometry (viewBox units); the SVG scales uniformly to the page width.
WIDTH, HEIGHT = 1000, 260
LEFT, RIGHT, TOP, BOTTOM = 72, 8, 10, 28
PLOT_W = WIDTH - LEFT - RIGHT
PLOT_H = HEIGHT - TOP - BOTTOM


@dataclass
class Curves:
    """Per column: first event, and min/max of active and reserved bytes over its events."""

    n_events: int
    start: np.ndarray  # int64 first event of each column (columns cover [start[k], start[k+1]))
    active_min: np.ndarray
    active_max: np.ndarray
    reserved_min: np.ndarray
    reserved_max: np.ndarray
    time_us: np.ndarray | None = None  # time of each column's first event, None if untimed
    peak_event: int = -1
    peak_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "n": self.n_events,
            "start": self.start,
            "amin": self.active_min,
            "amax": self.active_max,
            "rmin": self.reserved_min,
            "rmax": self.reserved_max,
            "t": self.time_us,
            "peak": self.peak_event,
        }


def minmax_bins(values: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start index, min, max) of `values` cut into at most `bins` contiguous columns."""
    n = len(values)
    if n <= bins:
        idx = np.arange(n, dtype=np.int64)
        return idx, values.copy(), values.copy()
    starts = np.linspace(0, n, bins + 1).astype(np.int64)[:-1]  # strictly increasing: n > bins
    return starts, np.minimum.reduceat(values, starts), np.maximum.reduceat(values, starts)


def downsample(dev: DeviceTrace, bins: int = DEFAULT_BINS) -> Curves:
    start, amin, amax = minmax_bins(np.asarray(dev.active_after), bins)
    _, rmin, rmax = minmax_bins(np.asarray(dev.reserved_after), bins)
    timed = dev.n_events > 0 and bool(dev.time_us[0] >= 0)
    return Curves(
        n_events=dev.n_events,
        start=start,
        active_min=amin,
        active_max=amax,
        reserved_min=rmin,
        reserved_max=rmax,
        time_us=np.asarray(dev.time_us)[start] if timed else None,
        peak_event=dev.peak_event_index,
        peak_bytes=dev.peak_active_bytes,
    )


@dataclass
class StageBand:
    """A shaded range of events behind the curves (an annotated stage), with its name."""

    first: int
    last: int
    label: str
    depth: int = 0


@dataclass
class Scale:
    n_events: int
    y_max: float
    ticks: list[int] = field(default_factory=list)

    def x(self, event: float) -> float:
        return LEFT + PLOT_W * (event / max(self.n_events, 1))

    def y(self, value: float) -> float:
        return TOP + PLOT_H * (1.0 - value / self.y_max)


def nice_byte_step(top: float, max_ticks: int = 5) -> int:
    """A round tick step (1, 2, 5, ... x a binary unit) giving at most `max_ticks` ticks."""
    for unit in (1, 1024, 1024**2, 1024**3, 1024**4, 1024**5):
        for m in (1, 2, 5, 10, 20, 50, 100, 200, 500):
            if top / (m * unit) <= max_ticks:
                return m * unit
    return 1024**6


def nice_count_step(top: float, max_ticks: int = 8) -> int:
    """A round event-count step (1, 2, 5 x a power of ten) giving at most `max_ticks` ticks."""
    base = 1
    while True:
        for m in (1, 2, 5):
            if top / (m * base) <= max_ticks:
                return m * base
        base *= 10


def _step_path(scale: Scale, start: np.ndarray, values: np.ndarray, n_events: int) -> str:
    """A filled step area: memory holds its value from one event to the next."""
    if len(values) == 0:
        return ""
    xs = [scale.x(float(s)) for s in start.tolist()] + [scale.x(float(n_events))]
    ys = [scale.y(float(v)) for v in values.tolist()]
    base = scale.y(0)
    parts = [f"M{xs[0]:.1f} {base:.1f}"]
    for k, yv in enumerate(ys):
        parts.append(f"V{yv:.1f}H{xs[k + 1]:.1f}")
    parts.append(f"V{base:.1f}Z")
    return "".join(parts)


def make_scale(curves: Curves) -> Scale:
    """Y up to a round step above the highest curve, x over every event."""
    top = float(
        max(int(curves.reserved_max.max(initial=0)), int(curves.active_max.max(initial=0)), 1)
    )
    step = nice_byte_step(top * 1.05)
    scale = Scale(curves.n_events, max(top * 1.05, step))
    v = 0
    while v <= scale.y_max:
        scale.ticks.append(v)
        v += step
    return scale


def _step_line(scale: Scale, start: np.ndarray, values: np.ndarray, n_events: int) -> str:
    """The same steps as _step_path, as an open line (for the min curve over the bands)."""
    if len(values) == 0:
        return ""
    xs = [scale.x(float(s)) for s in start.tolist()] + [scale.x(float(n_events))]
    ys = [scale.y(float(v)) for v in values.tolist()]
    return f"M{xs[0]:.1f} {ys[0]:.1f}" + "".join(
        f"V{yv:.1f}H{xs[k + 1]:.1f}" for k, yv in enumerate(ys)
    )


def timeline_svg(
    curves: Curves,
    stages: list[StageBand] | None = None,
    *,
    svg_id: str = "timeline-svg",
    scale: Scale | None = None,
    allocation_bands: str = "",
) -> str:
    """The timeline as inline SVG (works with scripts off; the page script adds hovering).

    Layers, bottom to top: stage bands, grid, reserved, active (max per column), the
    allocation bands (already-rendered SVG, see bands.py), active min as a line, the peak.
    """
    scale = scale or make_scale(curves)
    n = curves.n_events
    out = [
        f'<svg class="timeline" id="{esc(svg_id)}" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="memory over events" xmlns="http://www.w3.org/2000/svg">'
    ]
    for b in stages or []:
        x0, x1 = scale.x(b.first), scale.x(b.last + 1)
        h = PLOT_H / 12
        w = max(x1 - x0, 0.5)
        out.append(
            f'<rect class="stage-band d{b.depth % 4}" x="{x0:.1f}" y="{TOP:.1f}" width="{w:.1f}" height="{PLOT_H:.1f}"/>'
            f'<rect class="stage-tick d{b.depth % 4}" x="{x0:.1f}" y="{TOP + b.depth % 4 * h:.1f}" width="{w:.1f}" height="{h:.1f}"/>'
        )
    for v in scale.ticks:
        y = scale.y(v)
        out.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
        )
        out.append(
            f'<text class="ylab" x="{LEFT - 6}" y="{y + 4:.1f}">{esc(format_bytes(v, 1))}</text>'
        )
    xstep = nice_count_step(max(n, 1))
    for e in range(0, n + 1, xstep):
        x = scale.x(e)
        out.append(
            f'<line class="xtick" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + PLOT_H:.1f}" y2="{TOP + PLOT_H + 4:.1f}"/>'
        )
        # the last label would be cut by the right edge: anchor it at its end instead
        anchor = ' style="text-anchor:end"' if x > WIDTH - RIGHT - 20 else ""
        out.append(f'<text class="xlab" x="{x:.1f}" y="{HEIGHT - 8}"{anchor}>{e:,}</text>')
    out.append(
        f'<path class="reserved-max" d="{_step_path(scale, curves.start, curves.reserved_max, n)}"/>'
    )
    out.append(
        f'<path class="active-max" d="{_step_path(scale, curves.start, curves.active_max, n)}"/>'
    )
    # the hit area sits under the allocation bands so they can be hovered themselves
    out.append(
        f'<rect class="timeline-hit" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" fill="transparent"/>'
    )
    out.append(allocation_bands)
    out.append(
        f'<path class="active-min" d="{_step_line(scale, curves.start, curves.active_min, n)}"/>'
    )
    if curves.peak_event >= 0:
        x = scale.x(curves.peak_event + 0.5)
        out.append(f'<line class="peak" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{TOP + PLOT_H}"/>')
    out.append(
        f'<line class="cursor" x1="0" x2="0" y1="{TOP}" y2="{TOP + PLOT_H}" visibility="hidden"/>'
    )
    out.append("</svg>")
    return "".join(out)


GEOMETRY = {"width": WIDTH, "left": LEFT, "plotW": PLOT_W, "top": TOP, "plotH": PLOT_H}

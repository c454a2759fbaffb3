"""Small inline SVG charts for the dashboard: a line chart and a horizontal bar chart.

Plain strings, no library: the dashboard must stay one self-contained file, and a chart
is a few hundred points at most (``MAX_POINTS``; longer series are sampled evenly).
"""

from __future__ import annotations

import html
import math

import numpy as np

from memlens.inspector.render.colors import pick
from memlens.units import format_bytes

MAX_POINTS = 400


def fmt_value(v: float) -> str:
    """A statistic for a label: three significant digits; nan/inf as Python spells them."""
    if not math.isfinite(v):
        return str(v)
    return f"{v:.3g}"


def svg_chart(
    x: np.ndarray,
    series: list[tuple[str, np.ndarray, str]],
    *,
    title: str,
    width: int = 300,
    height: int = 150,
    log: bool = False,
    band: tuple[np.ndarray, np.ndarray] | None = None,
) -> str:
    """A small line chart; NaN points break the line."""
    pad_l, pad_r, pad_t, pad_b = 58, 8, 18, 18
    idx = pick(len(x), MAX_POINTS)
    x = np.asarray(x, dtype=np.float64)[idx]
    ys = [(name, np.asarray(v, dtype=np.float64)[idx], c) for name, v, c in series]
    if band is not None:
        band = (
            np.asarray(band[0], dtype=np.float64)[idx],
            np.asarray(band[1], dtype=np.float64)[idx],
        )

    def tr(v: np.ndarray) -> np.ndarray:
        if not log:
            return v
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(v > 0, np.log10(np.where(v > 0, v, 1)), np.nan)

    allv = [tr(v) for _, v, _ in ys] + ([tr(band[0]), tr(band[1])] if band is not None else [])
    finite = np.concatenate([v[np.isfinite(v)] for v in allv]) if allv else np.zeros(0)
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{html.escape(title)}</title>',
        f'<text x="{pad_l}" y="12" class="ct">{html.escape(title)}</text>',
    ]
    if finite.size == 0 or len(x) == 0:
        out.append(f'<text x="{pad_l}" y="{height // 2}" class="ax">no finite values</text></svg>')
        return "".join(out)
    y0, y1 = float(finite.min()), float(finite.max())
    if y1 <= y0:
        y0, y1 = y0 - 0.5 * (abs(y0) or 1), y1 + 0.5 * (abs(y1) or 1)
    x0, x1 = float(x.min()), float(x.max())
    if x1 <= x0:
        x0, x1 = x0 - 1, x1 + 1
    pw, ph = width - pad_l - pad_r, height - pad_t - pad_b

    def px(v: float) -> float:
        return pad_l + (v - x0) / (x1 - x0) * pw

    def py(v: float) -> float:
        return pad_t + ph - (v - y0) / (y1 - y0) * ph

    lab = (lambda v: fmt_value(10**v)) if log else fmt_value
    out.append(
        f'<rect x="{pad_l}" y="{pad_t}" width="{pw}" height="{ph}" class="plot"/>'
        f'<text x="{pad_l - 3}" y="{pad_t + 8}" class="ax" text-anchor="end">{lab(y1)}</text>'
        f'<text x="{pad_l - 3}" y="{pad_t + ph}" class="ax" text-anchor="end">{lab(y0)}</text>'
        f'<text x="{pad_l}" y="{height - 4}" class="ax">step {int(x0)}</text>'
        f'<text x="{width - pad_r}" y="{height - 4}" class="ax" text-anchor="end">{int(x1)}</text>'
    )
    if band is not None:
        lo, hi = tr(band[0]), tr(band[1])
        ok = np.isfinite(lo) & np.isfinite(hi)
        if ok.any():
            pts = [f"{px(a):.1f},{py(b):.1f}" for a, b in zip(x[ok], hi[ok], strict=True)]
            pts += [
                f"{px(a):.1f},{py(b):.1f}" for a, b in zip(x[ok][::-1], lo[ok][::-1], strict=True)
            ]
            out.append(f'<polygon points="{" ".join(pts)}" class="band"/>')
    for _name, v, color in ys:
        tv = tr(v)
        seg: list[str] = []
        segs: list[list[str]] = []
        for a, b in zip(x, tv, strict=True):
            if math.isfinite(b):
                seg.append(f"{px(a):.1f},{py(b):.1f}")
            elif seg:
                segs.append(seg)
                seg = []
        if seg:
            segs.append(seg)
        for sg in segs:
            if len(sg) == 1:
                cx, cy = sg[0].split(",")
                out.append(f'<circle cx="{cx}" cy="{cy}" r="2" fill="{color}"/>')
            else:
                out.append(
                    f'<polyline points="{" ".join(sg)}" fill="none" stroke="{color}" stroke-width="1.5"/>'
                )
    lx = pad_l + 4
    for name, _, color in ys:
        out.append(
            f'<text x="{lx}" y="{pad_t + 10}" class="lg" fill="{color}">{html.escape(name)}</text>'
        )
        lx += 7 * len(name) + 10
    out.append("</svg>")
    return "".join(out)


def svg_bars(items: list[tuple[str, float]], *, title: str, width: int = 640) -> str:
    row = 16
    height = 22 + row * max(len(items), 1)
    label_w = 260
    vmax = max((v for _, v in items), default=0) or 1
    out = [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{html.escape(title)}</title>'
        f'<text x="4" y="12" class="ct">{html.escape(title)}</text>'
    ]
    for i, (name, v) in enumerate(items):
        y = 20 + i * row
        w = (width - label_w - 90) * v / vmax
        short = name if len(name) <= 40 else "…" + name[-39:]
        out.append(
            f'<text x="{label_w - 4}" y="{y + 11}" class="ax" text-anchor="end">{html.escape(short)}</text>'
            f'<rect x="{label_w}" y="{y + 2}" width="{w:.1f}" height="{row - 4}" fill="#1f77b4"/>'
            f'<text x="{label_w + w + 4:.1f}" y="{y + 11}" class="ax">{format_bytes(v, precision=1)}</text>'
        )
    out.append("</svg>")
    return "".join(out)

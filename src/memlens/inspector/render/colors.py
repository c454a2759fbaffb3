"""Colour maps, images and the series sampling the charts, plots and videos share.

``colorize`` turns a 2-D array into RGB through a matplotlib colormap (looked up once, as
a 256-entry table); ``hist_over_time`` makes the one image of a tensor's histograms over
its samples; ``pick`` chooses at most ``limit`` evenly spread samples to draw.
"""

from __future__ import annotations

import base64
import io
import math

import numpy as np

from memlens.inspector.store import TensorSeries

MAX_COLUMNS = 400  # samples drawn in a histogram-over-time image
COLORS = {
    "mean": "#1f77b4",
    "min": "#2ca02c",
    "max": "#d62728",
    "norm": "#9467bd",
    "frac_zeros": "#7f7f7f",
    "nan": "#e377c2",
    "inf": "#ff7f0e",
}

_LUTS: dict[str, np.ndarray] = {}


def lut(name: str) -> np.ndarray:
    """The 256 RGB colours (uint8) of matplotlib colormap ``name``."""
    if name not in _LUTS:
        import matplotlib

        cmap = matplotlib.colormaps[name]
        _LUTS[name] = (cmap(np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)
    return _LUTS[name]


def colorize(a: np.ndarray, vmin: float, vmax: float, cmap: str) -> np.ndarray:
    """uint8 RGB image of a 2-D array; non-finite cells are drawn black."""
    a = np.asarray(a, dtype=np.float64)
    span = vmax - vmin if vmax > vmin else 1.0
    idx = np.clip(
        (np.nan_to_num(a, nan=vmin, posinf=vmax, neginf=vmin) - vmin) / span * 255, 0, 255
    )
    rgb: np.ndarray = lut(cmap)[idx.astype(np.uint8)]
    rgb[~np.isfinite(a)] = 0
    return rgb


def heat_scale(arrays: list[np.ndarray]) -> tuple[float, float, str]:
    """(vmin, vmax, colormap) for heatmaps: the 0.5-99.5 percentile range, so one outlier
    does not wash out the image; symmetric and diverging when it spans zero."""
    vals = np.concatenate([a[np.isfinite(a)].ravel() for a in arrays]) if arrays else np.zeros(0)
    if vals.size == 0:
        return 0.0, 1.0, "viridis"
    lo, hi = np.percentile(vals, [0.5, 99.5])
    if lo < 0 < hi:
        m = max(-lo, hi)
        return -m, m, "RdBu_r"
    return float(lo), float(hi if hi > lo else lo + 1), "viridis"


def png_bytes(rgb: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def data_uri(rgb: np.ndarray) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(rgb)).decode("ascii")


def pick(n: int, limit: int) -> np.ndarray:
    """Indices of at most ``limit`` of ``n`` samples, evenly spread, first and last included."""
    return (
        np.arange(n) if n <= limit else np.unique(np.linspace(0, n - 1, limit).round().astype(int))
    )


def hist_over_time(s: TensorSeries, rows: int = 64) -> tuple[np.ndarray, float, float, np.ndarray]:
    """Histograms re-binned onto one value axis: (rows, samples) densities, lo, hi, columns."""
    cols = pick(len(s), MAX_COLUMNS)
    lo_all = np.nanmin(s.hist_lo[cols]) if np.isfinite(s.hist_lo[cols]).any() else 0.0
    hi_all = np.nanmax(s.hist_hi[cols]) if np.isfinite(s.hist_hi[cols]).any() else 1.0
    if not hi_all > lo_all:
        hi_all = lo_all + 1.0
    img = np.zeros((rows, len(cols)))
    for j, i in enumerate(cols):
        counts = s.hist[i].astype(np.float64)
        lo, hi = s.hist_lo[i], s.hist_hi[i]
        if not (math.isfinite(lo) and math.isfinite(hi)) or counts.sum() == 0:
            continue
        nb = counts.size
        centers = lo + (np.arange(nb) + 0.5) * ((hi - lo) / nb) if hi > lo else np.full(nb, lo)
        col, _ = np.histogram(centers, bins=rows, range=(lo_all, hi_all), weights=counts)
        img[:, j] = col / col.sum() if col.sum() else 0
    return np.log1p(img * 100)[::-1], float(lo_all), float(hi_all), cols

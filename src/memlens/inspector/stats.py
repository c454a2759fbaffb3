"""Per-tensor statistics in numpy: the one definition both sides agree on.

The training process reduces large tensors on their own device (see ``reduce.py``) into
*partials*: one row of :data:`PARTIAL_COLUMNS` per chunk of the flattened tensor. Small
tensors are shipped raw and the background process builds the same rows here with numpy.
Either way :func:`combine` turns the rows into the statistics that are stored, so a value
means the same thing whichever path it took.

Definitions (all in float64):

- ``mean``, ``std``, ``min``, ``max`` and ``norm`` are taken over the *finite* elements only;
  ``std`` is the population standard deviation (``numpy.std``, ``correction=0``) and ``norm``
  the L2 norm. With no finite element they are ``nan`` (``norm`` is 0).
- ``frac_zeros`` is the fraction of all elements that are exactly zero.
- ``nan`` and ``inf`` count NaN and +/-Inf elements.
- The histogram has ``bins`` equal bins over ``[min, max]`` of the finite elements; element
  ``x`` goes to bin ``floor((x - min) * (bins / (max - min)))`` clipped to the last bin (all
  to bin 0 when ``max == min``).
- The heatmap of a tensor with two or more dimensions is its last two dimensions at index 0
  of every leading one (``x[0, 0, ..., :, :]``), average-pooled like
  ``torch.nn.functional.adaptive_avg_pool2d`` to at most ``size x size``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

PARTIAL_COLUMNS = ("count", "finite", "mean", "m2", "min", "max", "zeros", "nans", "infs", "sumsq")
N_PARTIAL = len(PARTIAL_COLUMNS)
STAT_NAMES = ("mean", "std", "min", "max", "norm", "frac_zeros", "nan", "inf")


def as_float64(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype == np.float64:
        return a
    return a.astype(np.float64)


def partials_from_array(a: np.ndarray) -> np.ndarray:
    """One partial row (shape ``(1, N_PARTIAL)``) for a whole array."""
    x = as_float64(a).ravel()
    fin = np.isfinite(x)
    nf = int(fin.sum())
    xf = x[fin] if nf != x.size else x
    if nf:
        mean = float(xf.mean())
        d = xf - mean
        m2 = float(np.dot(d, d))
        mn, mx = float(xf.min()), float(xf.max())
        sumsq = float(np.dot(xf, xf))
    else:
        mean, m2, mn, mx, sumsq = 0.0, 0.0, math.inf, -math.inf, 0.0
    nans = int(np.isnan(x).sum()) if nf != x.size else 0
    infs = x.size - nf - nans
    zeros = int(np.count_nonzero(x == 0))
    return np.array([[x.size, nf, mean, m2, mn, mx, zeros, nans, infs, sumsq]], dtype=np.float64)


def combine(partials: np.ndarray) -> dict[str, float]:
    """Merge partial rows (Chan et al. parallel variance) into the stored statistics."""
    p = np.asarray(partials, dtype=np.float64).reshape(-1, N_PARTIAL)
    count = p[:, 0].sum()
    n = p[:, 1]
    total = n.sum()
    nan = float(p[:, 7].sum())
    inf = float(p[:, 8].sum())
    frac_zeros = float(p[:, 6].sum() / count) if count else math.nan
    if total <= 0:
        return {
            "mean": math.nan,
            "std": math.nan,
            "min": math.nan,
            "max": math.nan,
            "norm": 0.0,
            "frac_zeros": frac_zeros,
            "nan": nan,
            "inf": inf,
        }
    has = n > 0
    means = p[has, 2]
    mean = float((n[has] * means).sum() / total)
    m2 = float(p[has, 3].sum() + (n[has] * (means - mean) ** 2).sum())
    return {
        "mean": mean,
        "std": math.sqrt(max(m2, 0.0) / total),
        "min": float(p[has, 4].min()),
        "max": float(p[has, 5].max()),
        "norm": math.sqrt(max(float(p[:, 9].sum()), 0.0)),
        "frac_zeros": frac_zeros,
        "nan": nan,
        "inf": inf,
    }


def histogram(a: np.ndarray, bins: int) -> tuple[np.ndarray, float, float]:
    """Counts over ``[lo, hi]`` of the finite values, and that range (nan, nan if none)."""
    x = as_float64(a).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return np.zeros(bins, dtype=np.int64), math.nan, math.nan
    lo, hi = float(x.min()), float(x.max())
    if hi > lo:
        scale = bins / (hi - lo)
        idx = np.floor((x - lo) * scale)
        idx = np.clip(idx, 0, bins - 1).astype(np.int64)
    else:
        idx = np.zeros(x.size, dtype=np.int64)
    return np.bincount(idx, minlength=bins).astype(np.int64), lo, hi


def heatmap_source(a: np.ndarray) -> np.ndarray | None:
    """The 2-D slice a heatmap is drawn from, or None for 0-D/1-D tensors."""
    a = np.asarray(a)
    if a.ndim < 2 or a.size == 0:
        return None
    out: np.ndarray = a[(0,) * (a.ndim - 2)]
    return out


def heatmap_shape(shape: tuple[int, ...] | list[int], size: int) -> tuple[int, int] | None:
    if len(shape) < 2 or any(s == 0 for s in shape):
        return None
    return min(int(shape[-2]), size), min(int(shape[-1]), size)


def _bounds(n: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(out)
    return (i * n) // out, -((-(i + 1) * n) // out)


def adaptive_avg_pool(a: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """``torch.nn.functional.adaptive_avg_pool2d`` for one 2-D array, in numpy."""
    x = np.asarray(a)
    h, w = x.shape
    if (out_h, out_w) == (h, w):
        return x.astype(np.float32)
    if x.dtype != np.float64 and x.dtype != np.float32:
        x = x.astype(np.float64)
    rs, re = _bounds(h, out_h)
    cs, ce = _bounds(w, out_w)
    if h % out_h == 0 and w % out_w == 0:  # equal windows: a reshape and one mean
        pooled: np.ndarray = (
            x.reshape(out_h, h // out_h, out_w, w // out_w)
            .mean(axis=(1, 3), dtype=np.float64)
            .astype(np.float32)
        )
        return pooled
    if np.isfinite(x).all():
        # Separable prefix sums: rows first (the only pass over the whole slice), then
        # columns of the out_h x w row sums.
        s0 = np.zeros((h + 1, w), dtype=np.float64)
        np.cumsum(x, axis=0, dtype=np.float64, out=s0[1:])
        rows = s0[re] - s0[rs]
        s1 = np.zeros((out_h, w + 1), dtype=np.float64)
        np.cumsum(rows, axis=1, out=s1[:, 1:])
        tot = s1[:, ce] - s1[:, cs]
        area = np.outer(re - rs, ce - cs)
        return (tot / area).astype(np.float32)
    x = as_float64(x)
    out = np.empty((out_h, out_w), dtype=np.float64)
    for i in range(out_h):
        rows = x[rs[i] : re[i]]
        for j in range(out_w):
            out[i, j] = rows[:, cs[j] : ce[j]].mean()
    return out.astype(np.float32)


def heatmap(a: np.ndarray, size: int) -> np.ndarray | None:
    src = heatmap_source(a)
    if src is None:
        return None
    oh, ow = heatmap_shape(src.shape, size)  # type: ignore[misc]
    return adaptive_avg_pool(src, oh, ow)


def _finite_partials(x: np.ndarray) -> np.ndarray:
    """The partial row of an all-finite flat array, with as few passes as possible."""
    n = x.size
    total = float(np.add.reduce(x, dtype=np.float64))
    sumsq = float(np.einsum("i,i->", x, x, dtype=np.float64))
    mean = total / n
    m2 = sumsq - total * mean
    if not m2 >= 1e-3 * sumsq:  # large mean: cancellation; take the centred sum instead
        d = x.astype(np.float64) - mean
        m2 = float(np.einsum("i,i->", d, d))
    lo, hi = float(x.min()), float(x.max())
    zeros = int(np.count_nonzero(x == 0))
    return np.array([[n, n, mean, m2, lo, hi, zeros, 0, 0, sumsq]], dtype=np.float64)


def _finite_histogram(x: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    if not hi > lo:
        counts = np.zeros(bins, dtype=np.int64)
        counts[0] = x.size
        return counts
    buf = x.astype(np.float64)
    buf -= lo
    buf *= bins / (hi - lo)
    np.floor(buf, out=buf)
    np.minimum(buf, bins - 1, out=buf)
    return np.bincount(buf.astype(np.intp), minlength=bins).astype(np.int64)


def reduce_array(
    a: np.ndarray, *, bins: int, heatmap_size: int, hist_max_numel: int | None = None
) -> tuple[np.ndarray, int, tuple[int, int] | None]:
    """The packed vector of ``reduce.reduce_packed``, computed with numpy (read-only on ``a``).

    With ``hist_max_numel``, the histogram of a larger array is counted over an evenly
    strided subset of about that many elements and scaled to the full count (the range is
    still the exact min and max); every other statistic is exact.
    """
    a = np.asarray(a)
    flat = a.reshape(-1)
    kind = flat.dtype.kind
    if kind == "f" and flat.dtype.itemsize < 4:
        flat = flat.astype(np.float32)
    elif kind != "f":
        flat = flat.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        # NaN or Inf anywhere makes the sum or the sum of squares non-finite (squares of
        # float32 cannot overflow float64), so the all-finite fast path needs no extra pass.
        part = _finite_partials(flat) if flat.size else partials_from_array(flat)
        finite = bool(np.isfinite(part[0, 2]) and np.isfinite(part[0, 9]))
        if not finite:
            part = partials_from_array(flat)
        lo, hi = part[0, 4], part[0, 5]
        sub = flat
        if hist_max_numel and flat.size > hist_max_numel:
            sub = flat[:: -(-flat.size // hist_max_numel)]
        if finite:
            counts = _finite_histogram(sub, lo, hi, bins).astype(np.float64)
        elif hi >= lo:
            counts = _histogram_in(sub[np.isfinite(sub)], lo, hi, bins).astype(np.float64)
        else:
            counts = np.zeros(bins)
        if sub is not flat and counts.sum() > 0:
            counts = _scale_counts(counts, part[0, 1])
        hm = heatmap(a, heatmap_size) if heatmap_size > 0 else None
    heat = None if hm is None else hm.shape
    parts = [part.reshape(-1), counts, np.array([lo, hi], dtype=np.float64)]
    if hm is not None:
        parts.append(hm.reshape(-1).astype(np.float64))
    return np.concatenate(parts), 1, heat


def _histogram_in(x: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    return _finite_histogram(x, lo, hi, bins) if x.size else np.zeros(bins, dtype=np.int64)


def _scale_counts(counts: np.ndarray, total: float) -> np.ndarray:
    """Scale subset counts to ``total`` elements, in whole numbers that add up exactly."""
    exact = counts * (total / counts.sum())
    out: np.ndarray = np.floor(exact)
    short = int(round(total - out.sum()))
    if short > 0:
        out[np.argsort(out - exact)[:short]] += 1
    return out


def summarize_array(a: np.ndarray, *, bins: int, heatmap_size: int) -> dict[str, Any]:
    """Everything stored for one sample, computed exactly from the full array (the raw path)."""
    packed, nchunks, heat = reduce_array(a, bins=bins, heatmap_size=heatmap_size)
    return unpack_reduced(packed, nchunks, bins, heat)


def unpack_reduced(
    packed: np.ndarray, nchunks: int, bins: int, heat: tuple[int, int] | None
) -> dict[str, Any]:
    """Everything stored for one sample, from the vector the device reduction shipped."""
    packed = np.asarray(packed, dtype=np.float64)
    k = nchunks * N_PARTIAL
    partials = packed[:k].reshape(nchunks, N_PARTIAL)
    stats = combine(partials)
    counts = np.rint(packed[k : k + bins]).astype(np.int64)
    lo, hi = packed[k + bins], packed[k + bins + 1]
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        lo = hi = math.nan
    hm = None
    if heat is not None:
        start = k + bins + 2
        hm = packed[start : start + heat[0] * heat[1]].reshape(heat).astype(np.float32)
    return {**stats, "hist": counts, "hist_lo": float(lo), "hist_hi": float(hi), "heatmap": hm}

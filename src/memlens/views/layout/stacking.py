"""Stacking the Active Memory Timeline's bands: each band's runs of constant bottom offset
(bands in allocation order, band k on columns [c0[k], c1[k])), and per-column sums. Pure
functions on columns, shared by the viewport (viewport.py) and its stream lanes (lanes.py).
"""

from __future__ import annotations

import numpy as np


def stack_bands(
    c0: np.ndarray, c1: np.ndarray, sizes: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Stack bands (in row order, band k on columns [c0[k], c1[k])): each band's runs of
    constant bottom offset (run_start [K+1], run_col, run_off, band-major), and the bytes
    and count of the drawn bands per column.

    The set of bands changes only at their ends, so the stacking is done once per segment
    between consecutive ends (zoomed in, a few hundred instead of every column), and a
    band's consecutive segments at the same offset make one run: never O(bands x columns).
    """
    edges, slot = column_edges(c0, c1, width)
    s0, s1 = slot[c0], slot[c1]
    lengths = s1 - s0
    n_cells = int(lengths.sum())
    starts = np.cumsum(lengths) - lengths
    seg = np.repeat(s0 - starts, lengths) + np.arange(n_cells, dtype=np.int64)
    psize = np.repeat(sizes, lengths)
    # cells are band-major with bands in row order, so a stable sort by segment alone gives
    # (segment, row) order: allocation order within each segment (a radix sort)
    n_seg = max(len(edges) - 1, 0)
    order = np.argsort(seg.astype(np.uint16 if n_seg < 1 << 16 else np.int64), kind="stable")
    s_size = psize[order]
    s_seg = seg[order]
    before = np.zeros(n_seg + 1, dtype=np.int64)
    np.cumsum(np.bincount(s_seg, weights=s_size, minlength=n_seg).astype(np.int64), out=before[1:])
    seg_off = np.empty(n_cells, dtype=np.int64)
    seg_off[order] = np.cumsum(s_size) - s_size - before[s_seg]
    # runs: a band's first segment, and every segment whose offset differs from the last
    change = np.ones(n_cells, dtype=bool)
    if n_cells:
        change[1:] = seg_off[1:] != seg_off[:-1]
        change[starts[lengths > 0]] = True
    band_of = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    cells = np.flatnonzero(change)
    run_start = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(np.bincount(band_of[cells], minlength=len(lengths)), out=run_start[1:])
    drawn_sum = np.zeros(width, dtype=np.int64)
    drawn_count = np.zeros(width, dtype=np.int64)
    if n_seg:
        seg_cols = np.diff(edges)
        drawn_sum[edges[0] : edges[-1]] = np.repeat(np.diff(before), seg_cols)
        count = np.bincount(seg, minlength=n_seg).astype(np.int64)
        drawn_count[edges[0] : edges[-1]] = np.repeat(count, seg_cols)
    return run_start, edges[seg[cells]].astype(np.int64), seg_off[cells], drawn_sum, drawn_count


def column_edges(c0: np.ndarray, c1: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct columns in c0 and c1 (all in [0, width]), without a sort, and
    for each of those columns its index among them (a table lookup, where a binary search
    per band costs milliseconds on a wide view's half a million candidates)."""
    seen = np.zeros(width + 1, dtype=bool)
    seen[c0] = True
    seen[c1] = True
    return np.flatnonzero(seen), np.cumsum(seen) - 1


def per_column(
    c0: np.ndarray, c1: np.ndarray, sizes: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """How many of the bands (band k on columns [c0[k], c1[k])) cover each column, and
    their bytes: O(bands + width) by differences."""
    n = np.bincount(c0, minlength=width + 1) - np.bincount(c1, minlength=width + 1)
    b = np.bincount(c0, weights=sizes, minlength=width + 1) - np.bincount(
        c1, weights=sizes, minlength=width + 1
    )
    return np.cumsum(n[:width]).astype(np.int64), np.cumsum(b[:width]).round().astype(np.int64)


def gather_ranges(
    starts: np.ndarray, lengths: np.ndarray, source: np.ndarray | None = None
) -> np.ndarray:
    """Concatenation of source[s:s+l] for each (s, l) (or of the ranges themselves)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    first = np.cumsum(lengths) - lengths
    idx = np.repeat(np.asarray(starts, dtype=np.int64) - first, lengths) + np.arange(
        total, dtype=np.int64
    )
    return idx if source is None else source[idx]

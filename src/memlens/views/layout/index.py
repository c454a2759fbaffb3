"""The two indexes under the viewport layout: range maxima and rows alive at an event.

Both are built once per device (DeviceLayout caches them) and answer each viewport query
without touching every event or every allocation.
"""

from __future__ import annotations

import numpy as np

from memlens.snapshot.model import DeviceTrace


class IdentityLevel:
    """Level 0 of a pyramid (blocks of one value: block k's argmax is k) without an
    n-long array: a kept pyramid's first level costs nothing to open (10.9M events: 87 MB
    written at every start otherwise)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        return np.asarray(index, dtype=np.int64)


class RangeArgmax:
    """Leftmost argmax of `values` over many half-open ranges, O(log n) per range.

    Level k holds, for each aligned block of 2**k values, the index of its maximum; a range
    is decomposed bottom-up like a segment-tree query, vectorized over all ranges.
    """

    def __init__(
        self, values: np.ndarray, levels: list[np.ndarray | IdentityLevel] | None = None
    ) -> None:
        self.values = values
        self.levels: list[np.ndarray | IdentityLevel]
        if levels is not None:  # kept from an earlier build (persist.py checked them)
            self.levels = levels
            return
        # carry the block maxima along so each level compares two strided views (no gather)
        idx = np.arange(len(values), dtype=np.int64)
        vals = np.asarray(values)
        self.levels = [idx]
        while len(idx) > 1:
            if len(idx) % 2:
                idx = np.concatenate([idx, idx[-1:]])  # a duplicate never changes a max
                vals = np.concatenate([vals, vals[-1:]])
            right = vals[1::2] > vals[0::2]  # ties keep the left (leftmost argmax)
            idx = np.where(right, idx[1::2], idx[0::2])
            vals = np.where(right, vals[1::2], vals[0::2])
            self.levels.append(idx)

    def query(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Index of the (leftmost) maximum of values[lo[i]:hi[i]]; -1 where the range is empty."""
        lo = np.asarray(lo, dtype=np.int64).copy()
        hi = np.asarray(hi, dtype=np.int64).copy()
        best = np.full(len(lo), -1, dtype=np.int64)
        if len(self.values) == 0:
            return best
        vals = self.values

        def take(mask: np.ndarray, cand: np.ndarray) -> None:
            cur = best[mask]
            cv = vals[cand]
            better = (
                (cur < 0)
                | (cv > vals[np.maximum(cur, 0)])
                | ((cv == vals[np.maximum(cur, 0)]) & (cand < cur))
            )
            sel = np.flatnonzero(mask)[better]
            best[sel] = cand[better]

        for level in self.levels:
            live = lo < hi
            if not live.any():
                break
            m = live & (lo & 1 == 1)
            if m.any():
                take(m, level[lo[m]])
                lo[m] += 1
            m = (lo < hi) & (hi & 1 == 1)
            if m.any():
                hi[m] -= 1
                take(m, level[hi[m]])
            lo >>= 1
            hi >>= 1
        return best


class LiveIndex:
    """Rows alive right after an event, in O(live + checkpoint spacing) instead of O(rows).

    Rows are in allocation order, so their alloc_event never decreases; every `step` events
    the rows alive at that checkpoint are stored (CSR). step is chosen so that the stored
    entries stay around twice the number of events.
    """

    def __init__(
        self, dev: DeviceTrace, kept: tuple[int, np.ndarray, np.ndarray] | None = None
    ) -> None:
        n = dev.n_events
        # read only: no copy when the columns are int64 already
        a = np.asarray(dev.alloc_event, dtype=np.int64)
        f = np.asarray(dev.free_event, dtype=np.int64)
        self.alloc_event, self.free_event = a, f
        if kept is not None:  # (step, rows, offsets) of an earlier build, checked
            self.step, self.rows, self.offsets = kept
            self.n_ck = len(self.offsets) - 1
            return
        lifetime = int(np.sum(f - np.maximum(a, 0))) if len(a) else 0
        self.step = step = max(256, -(-lifetime // max(2 * n, 1)))
        n_ck = n // step + 1 if n else 0
        self.n_ck = n_ck
        k_lo = -((-a) // step)  # first checkpoint k with k*step >= alloc_event
        k_hi = np.minimum((f - 1) // step, n_ck - 1)
        count = np.maximum(k_hi - k_lo + 1, 0)
        total = int(count.sum())
        rows = np.repeat(np.arange(len(a), dtype=np.int64), count)
        first = np.repeat(k_lo, count)
        starts = np.repeat(np.cumsum(count) - count, count)
        k = first + (np.arange(total, dtype=np.int64) - starts)
        # stable: rows stay in allocation order per checkpoint (radix sort on small ints)
        kt = np.uint16 if n_ck <= 1 << 16 else np.int32
        order = np.argsort(k.astype(kt), kind="stable")
        self.rows = rows[order].astype(np.int32)
        self.offsets = np.zeros(n_ck + 1, dtype=np.int64)
        np.cumsum(np.bincount(k, minlength=n_ck), out=self.offsets[1:])

    def live_at(self, event: int) -> np.ndarray:
        a, f = self.alloc_event, self.free_event
        if event < 0 or self.n_ck == 0:
            hi = int(np.searchsorted(a, event, side="right"))
            r = np.arange(hi, dtype=np.int64)
            return r[f[r] > event]
        k = min(event // self.step, self.n_ck - 1)
        cp = k * self.step
        base = self.rows[self.offsets[k] : self.offsets[k + 1]].astype(np.int64)
        base = base[f[base] > event]
        lo = int(np.searchsorted(a, cp, side="right"))
        hi = int(np.searchsorted(a, event, side="right"))
        new = np.arange(lo, hi, dtype=np.int64)
        new = new[f[new] > event]
        return np.concatenate([base, new])

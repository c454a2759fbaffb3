"""The two indexes under the viewport layout: range maxima and rows alive at an event.

Both are built once per device (DeviceLayout caches them) and answer each viewport query
without touching every event or every allocation.
"""

from __future__ import annotations

import numpy as np

from memlens.snapshot.model import DeviceTrace

# The pyramid's levels below this one are not stored: a block of at most 2**(BLOCK_LEVELS-1)
# values has its argmax found when a query asks for it. Building levels 1..5 was nearly
# all of a pyramid's build (0.1-0.17 s each at 4M events, on the path of a cold first
# paint) and five sixths of what is kept beside the cache for the next start.
BLOCK_LEVELS = 6


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


class BlockLevel:
    """Level k (1 <= k < BLOCK_LEVELS) of a pyramid, not stored: block i's (leftmost)
    argmax among values[i * 2**k : (i + 1) * 2**k], found when asked (a query asks for
    two blocks per range and level: at most 2 x 32 values each)."""

    def __init__(self, values: np.ndarray, k: int) -> None:
        self.values, self.k = values, k
        self.n = -(-len(values) >> k)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        index = np.asarray(index, dtype=np.int64)
        pos = (index[:, None] << self.k) + np.arange(1 << self.k, dtype=np.int64)
        # past the end: the last value again, which never changes the leftmost maximum
        np.minimum(pos, len(self.values) - 1, out=pos)
        first = np.argmax(self.values[pos], axis=1)  # the first of equal maxima
        return np.asarray(pos[np.arange(len(index)), first], dtype=np.int64)


Level = np.ndarray | IdentityLevel | BlockLevel


def unstored_levels(values: np.ndarray) -> list[Level]:
    """A pyramid's levels that are not stored: the first BLOCK_LEVELS of those it has
    (a pyramid of n values has one level per halving down to 1, and level 0)."""
    n = len(values)
    count = 1 + max(n - 1, 0).bit_length()  # levels 0..ceil(log2 n)
    return [IdentityLevel(n), *(BlockLevel(values, k) for k in range(1, min(count, BLOCK_LEVELS)))]


class RangeArgmax:
    """Leftmost argmax of `values` over many half-open ranges, O(log n) per range.

    Level k holds, for each aligned block of 2**k values, the index of its maximum; a range
    is decomposed bottom-up like a segment-tree query, vectorized over all ranges. Levels
    below BLOCK_LEVELS are computed per query (BlockLevel); the others are stored, built
    from the blocks of 2**BLOCK_LEVELS values upward.
    """

    def __init__(self, values: np.ndarray, stored: list[np.ndarray] | None = None) -> None:
        self.values = values
        vals = np.asarray(values)
        self.levels: list[Level] = unstored_levels(vals)
        if stored is not None:  # kept from an earlier build (persist.py checked them)
            self.levels += stored
            return
        n = len(vals)
        if n <= 1 << (BLOCK_LEVELS - 1):  # no level of blocks of 2**BLOCK_LEVELS
            return
        # the first stored level at once: each block's first maximum (padded at the end
        # with the last value, which never changes the leftmost maximum)
        w = 1 << BLOCK_LEVELS
        pad = -n % w
        blocks = np.concatenate([vals, np.full(pad, vals[-1], dtype=vals.dtype)]) if pad else vals
        first = np.argmax(blocks.reshape(-1, w), axis=1)
        idx = np.minimum(np.arange(0, n + pad, w, dtype=np.int64) + first, n - 1)
        vals = vals[idx]
        self.levels.append(idx)
        # carry the block maxima along so each level compares two strided views (no gather)
        while len(idx) > 1:
            if len(idx) % 2:
                idx = np.concatenate([idx, idx[-1:]])  # a duplicate never changes a max
                vals = np.concatenate([vals, vals[-1:]])
            right = vals[1::2] > vals[0::2]  # ties keep the left (leftmost argmax)
            idx = np.where(right, idx[1::2], idx[0::2])
            vals = np.where(right, vals[1::2], vals[0::2])
            self.levels.append(idx)

    @property
    def stored(self) -> list[np.ndarray]:
        """The levels that are stored (kept beside the cache by persist.py)."""
        return [lv for lv in self.levels[BLOCK_LEVELS:] if isinstance(lv, np.ndarray)]

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

"""Which sub-pixel bands a viewport draws: the largest first, within a budget of runs.

Candidates are ordered by their rank in size order (largest first, ties in row order),
distinct small integers, so a wide view's half a million candidates are ordered through a
mask over the ranks rather than a sort or a partition (tens of milliseconds each).
"""

from __future__ import annotations

import numpy as np


def within_budget(
    sizes: np.ndarray, ranks: np.ndarray, runs: np.ndarray, bpp: float, max_runs: int, below: int
) -> tuple[np.ndarray, int]:
    """Which candidate bands to draw, and an upper bound on what is left to the aggregate.

    Bands at least a pixel tall are all drawn; the thinner ones (sizes in row order, each
    of at most `runs` runs) are taken largest first, ties in row order (that is, by `ranks`,
    the rows' positions in size order), until the runs of all drawn bands would pass
    `max_runs`. `below` bounds the sizes that were no candidates.
    """
    drawn = sizes >= bpp
    thin = np.flatnonzero(~drawn)
    room = max_runs - int(runs[drawn].sum())
    # each band costs at least 1 run: at most `room` can be taken, and the next one in
    # order is the largest left out
    thin = by_rank(thin, ranks[thin])[: max(room, 0) + 1]
    n_take = int(np.searchsorted(np.cumsum(runs[thin]), room, side="right"))
    drawn[thin[:n_take]] = True
    if n_take < len(thin):
        return drawn, int(sizes[thin[n_take]])  # the largest one left out
    return drawn, below


def by_rank(items: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """`items` ordered by their distinct integer `ranks`: many of them go through a mask
    over the ranks' span, O(items + span), where a sort of half a million costs tens of
    milliseconds; a few are sorted."""
    if len(ranks) == 0:
        return items
    lo = int(ranks.min())
    span = int(ranks.max()) - lo + 1
    if len(ranks) * 32 < span:
        return items[np.argsort(ranks)]
    slot = ranks - lo
    mask = np.zeros(span, dtype=bool)
    mask[slot] = True
    at = np.empty(span, dtype=items.dtype)
    at[slot] = items
    return at[np.flatnonzero(mask)]


def size_ranks(sizes: np.ndarray) -> np.ndarray:
    """Each item's position when ordered largest first, ties in item order."""
    ranks = np.empty(len(sizes), dtype=np.int64)
    ranks[np.argsort(-sizes, kind="stable")] = np.arange(len(sizes), dtype=np.int64)
    return ranks

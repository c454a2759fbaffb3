"""The layout indexes kept beside the column cache, so a second `memlens view` of a file
paints without rebuilding them (the live-row checkpoints alone take seconds at 4M events).

What is kept: both range-argmax pyramids (their stored levels: blocks of 64 values and up), the
live-row checkpoints, the rows in size order (with their -size, alloc and free event in
that order) and the live count per event. They are
stored through the cache's derived-array hook (dtype, shape and crc32 checked, tied to
the entry's key) and checked once more here for what a wrong value would break: every
index inside its table, the pyramid's and the checkpoints' shapes. Anything off and the
caller builds them again (and keeps the new ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from memlens.errors import CacheError
from memlens.snapshot.model import DeviceTrace
from memlens.snapshot.store import cache
from memlens.views.layout.index import BLOCK_LEVELS, LiveIndex, RangeArgmax

# Bump whenever an index's construction or meaning changes.
LAYOUT_FORMAT = 3
KEYS = [
    "active_levels",
    "reserved_levels",
    "live_step",
    "live_rows",
    "live_offsets",
    "by_size",
    "by_size_neg_sizes",
    "by_size_alloc_event",
    "by_size_free_event",
    "live_count",
]


def set_name(dev: DeviceTrace) -> str:
    return f"layout-v{LAYOUT_FORMAT}-d{dev.device}"


def _narrow(a: np.ndarray, bound: int) -> np.ndarray:
    """int32 when every value is below `bound` < 2**31: half the bytes to read and check."""
    return a.astype(np.int32) if bound < 1 << 31 else a.astype(np.int64)


def _stored_level_sizes(n: int) -> list[int]:
    """The lengths of a pyramid's stored levels (index.BLOCK_LEVELS and up) over n values."""
    sizes = []
    while n > 1:
        n = (n + 1) // 2
        sizes.append(n)
    return sizes[BLOCK_LEVELS - 1 :]


def save(dev: DeviceTrace, built: dict[str, Any]) -> bool:
    """Keep the indexes in `built` (DeviceLayout's, all of them built); False when the
    snapshot has no cache entry."""
    if not _is_the_entrys(dev):
        return False
    n, rows = dev.n_events, dev.n_allocations
    li: LiveIndex = built["live_index"]
    arrays = {
        "active_levels": _narrow(
            np.concatenate([np.zeros(0, np.int64), *built["active_max"].stored]), n
        ),
        "reserved_levels": _narrow(
            np.concatenate([np.zeros(0, np.int64), *built["reserved_max"].stored]), n
        ),
        "live_step": np.array([li.step], dtype=np.int64),
        "live_rows": li.rows,
        "live_offsets": li.offsets,
        "by_size": _narrow(built["by_size"][0], rows),
        # the columns in size order too: gathering them at random was most of a warm
        # start's opening of the indexes (0.36 s of 0.55 at 10.9M events, loaded box)
        "by_size_neg_sizes": built["by_size"][1],
        "by_size_alloc_event": _narrow(built["by_size"][2], n),
        "by_size_free_event": _narrow(built["by_size"][3], n + 1),
        "live_count": _narrow(built["live_count"], rows + 1),
    }
    return cache.save_derived(dev.snapshot, set_name(dev), arrays)


def load(dev: DeviceTrace) -> dict[str, Any] | None:
    """DeviceLayout's indexes as kept by `save`, None when none are kept; CacheError when
    the kept ones cannot be trusted."""
    got = cache.load_derived(dev.snapshot, set_name(dev), KEYS) if _is_the_entrys(dev) else None
    if got is None:
        return None
    n, n_rows = dev.n_events, dev.n_allocations
    sizes = _stored_level_sizes(n)

    def pyramid(flat: np.ndarray) -> list[np.ndarray]:
        if len(flat) != sum(sizes) or not _within(flat, n):
            raise CacheError("a kept range-max pyramid does not fit the trace")
        ends = np.cumsum(sizes)
        return [flat[e - s : e] for s, e in zip(sizes, ends)]

    step = int(got["live_step"][0]) if len(got["live_step"]) == 1 else 0
    offsets, live_rows = got["live_offsets"], got["live_rows"]
    n_ck = n // step + 1 if n and step > 0 else 0
    if (
        step < 1
        or len(offsets) != n_ck + 1
        or int(offsets[0]) != 0
        or int(offsets[-1]) != len(live_rows)
        or bool(np.any(np.diff(offsets) < 0))
        or not _within(live_rows, n_rows)
    ):
        raise CacheError("the kept live-row checkpoints do not fit the trace")
    order, live_count = got["by_size"], got["live_count"]
    if len(order) != n_rows or not _within(order, n_rows) or len(live_count) != n:
        raise CacheError("the kept size order or live count does not fit the trace")
    if n_rows and int(np.bincount(order, minlength=n_rows).max()) != 1:
        raise CacheError("the kept size order is not a permutation")
    neg = got["by_size_neg_sizes"]
    a_ev, f_ev = got["by_size_alloc_event"], got["by_size_free_event"]
    # values, not indexes: checked to be of the right length and range (their bytes are
    # checked by the derived-array hook's checksum, tied to the entry)
    if (
        len(neg) != n_rows
        or len(a_ev) != n_rows
        or len(f_ev) != n_rows
        or (
            n_rows
            and (
                int(neg.max()) > 0
                or int(a_ev.min()) < -1
                or int(a_ev.max()) >= n
                or not _within(f_ev, n + 1)
            )
        )
    ):
        raise CacheError("the kept columns in size order do not fit the trace")
    return {
        "active_max": RangeArgmax(np.asarray(dev.active_after), pyramid(got["active_levels"])),
        "reserved_max": RangeArgmax(
            np.asarray(dev.reserved_after), pyramid(got["reserved_levels"])
        ),
        "live_index": LiveIndex(dev, (step, live_rows, offsets)),
        "by_size": (order, neg, a_ev, f_ev),
        "live_count": live_count,
    }


def _is_the_entrys(dev: DeviceTrace) -> bool:
    """The trace is the one its snapshot holds (read from or written to the cache entry),
    not one built beside it from other columns."""
    return dev.snapshot.traces.get(dev.device) is dev


def _within(a: np.ndarray, n: int) -> bool:
    return not len(a) or (int(a.min()) >= 0 and int(a.max()) < n)

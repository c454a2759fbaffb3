"""Bytes per memory pool among the allocations live at an event (`summary`'s
`pools_at_peak`): the default pool (0, 0), a CUDA graph's or a `torch.cuda.MemPool`'s.

An allocation's pool is the one its alloc entry names (`pool_id`, recorded by recent
PyTorch), else that of the segment holding it at the event (allocator_state's segment
tracker: the segment's own entries, else the final segments), else unknown (None), never
a guessed default. Cost: one rewind of the segment tracker and a searchsorted over the
live allocations.

Which private pools the snapshot names at all (`private_pools`) tells how to read an
unknown pool: with none named (a trace from before entries carried `pool_id`, whose final
segments are all in the default pool), nothing suggests a private pool; with some, the
unknown bytes may be theirs.
"""

from __future__ import annotations

import numpy as np

from memlens.analysis.allocator_state import recorded_pools, segment_tracker
from memlens.analysis.results import PoolBytes
from memlens.snapshot.model import DeviceTrace


def private_pools(dev: DeviceTrace) -> list[list[int]]:
    """The private pools (every pool but the default (0, 0)) the device's trace entries
    (`pool_id`) or its final segments (`segment_pool_id`) name, in ascending order."""
    named = np.unique(dev.pool[dev.pool >= 0])
    pairs = {tuple(dev.snapshot.pools[k]) for k in named.tolist()}
    seg = dev.snapshot.segments
    rows = seg.of_device(dev.device)
    pairs |= set(zip(seg.pool_id0[rows].tolist(), seg.pool_id1[rows].tolist()))
    pairs.discard((0, 0))
    return [list(p) for p in sorted(pairs)]


def pool_bytes_at(dev: DeviceTrace, event: int) -> list[PoolBytes]:
    """Per pool, the requested bytes and count of the allocations live right after
    `event`, most bytes first (ties: by pool; the unknown pool last)."""
    rows = dev.live_at(event)
    if len(rows) == 0:
        return []
    pairs, known = recorded_pools(dev, dev.alloc_event[rows])
    if not known.all():
        tracker = segment_tracker(dev)
        tracker.rewind_to(event)
        start, size, _, _ = tracker.arrays()
        seg_pools = tracker.pools()
        addr = dev.alloc_addr[rows].astype(np.int64)
        k = np.searchsorted(np.asarray(start, dtype=np.int64), addr, side="right") - 1
        for i in np.flatnonzero(~known).tolist():
            s = int(k[i])
            if s >= 0 and addr[i] < int(start[s]) + int(size[s]) and seg_pools[s] is not None:
                pairs[i] = seg_pools[s]
                known[i] = True
    totals: dict[tuple[int, int] | None, list[int]] = {}
    for (p0, p1), ok, nbytes in zip(pairs.tolist(), known.tolist(), dev.alloc_size[rows].tolist()):
        t = totals.setdefault((p0, p1) if ok else None, [0, 0])
        t[0] += nbytes
        t[1] += 1
    order = sorted(totals.items(), key=lambda kv: (kv[0] is None, -kv[1][0], kv[0] or (0, 0)))
    return [
        {"pool": list(p) if p is not None else None, "bytes": b, "count": c} for p, (b, c) in order
    ]

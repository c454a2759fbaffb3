"""The viewer's Memory Pools card (MemoryViz's private-pool tab): per pool, its live bytes
over the whole trace as an envelope (the most in each column), and its share at the peak.

A pool is the default one (0, 0), a CUDA graph's or a `torch.cuda.MemPool`'s. Each
allocation belongs to the pool its alloc entry names (`pool_id`, recorded by recent
PyTorch), else the one its free entry names; an allocation no entry of the trace places
(made before the trace and alive throughout, or a trace without pool ids) counts in the
unknown pool (None). The figures at the peak are `summary`'s `pools_at_peak`
(analysis.pools), which also asks the segments. The same per stream where allocations were
made on several (MemoryViz's streams drawn apart), and reserved memory by segment size
(segment_sizes.py). Asked for after the first paint: one pass
over the allocations and one cumulative sum over the events per pool.
"""

from __future__ import annotations

import numpy as np

from memlens.analysis.allocator_state import recorded_pools
from memlens.analysis.pools import pool_bytes_at
from memlens.snapshot.model import DeviceTrace
from memlens.views.web.answers import PoolEnvelope, PoolsAnswer, StreamEnvelope
from memlens.views.web.segment_sizes import column_max, segment_size_envelopes


def allocation_pools(dev: DeviceTrace) -> tuple[np.ndarray, np.ndarray]:
    """Per allocation: its pool's index into dev.snapshot.pools, -1 where unknown; and
    the pool pairs (rows of an (n, 2) array) those indexes name."""
    pairs, known = recorded_pools(dev, dev.alloc_event)
    by_free, known_free = recorded_pools(dev, dev.free_event)
    take = ~known & known_free
    pairs[take] = by_free[take]
    known |= known_free
    table = np.asarray(dev.snapshot.pools, dtype=np.int64).reshape(-1, 2)
    index = np.full(len(known), -1, dtype=np.int64)
    for k, (p0, p1) in enumerate(table.tolist()):
        index[known & (pairs[:, 0] == p0) & (pairs[:, 1] == p1)] = k
    return index, table


def live_curve(dev: DeviceTrace, rows: np.ndarray) -> np.ndarray:
    """Live bytes of the allocations `rows` after each event (those made before the trace
    count from the start)."""
    n = dev.n_events
    size = dev.alloc_size[rows]
    born, freed = dev.alloc_event[rows], dev.free_event[rows]
    delta = np.zeros(n + 1, dtype=np.int64)
    np.add.at(delta, np.maximum(born, 0), np.where(born >= 0, size, 0))
    np.add.at(delta, np.minimum(freed, n), -size)
    curve: np.ndarray = int(size[born < 0].sum()) + np.cumsum(delta[:n])
    return curve


def pool_envelopes(dev: DeviceTrace, width: int) -> PoolsAnswer:
    """Each pool's live bytes after every event, reduced to `width` columns by their
    maximum; pools with most bytes at the peak first (the unknown pool last). The same
    per stream, where the trace has several (streams drawn apart)."""
    index, table = allocation_pools(dev)
    peak = dev.peak_event_index
    at_peak = {
        tuple(p["pool"]) if p["pool"] is not None else None: p for p in pool_bytes_at(dev, peak)
    }
    total_at_peak = sum(p["bytes"] for p in at_peak.values())
    pools: list[PoolEnvelope] = []
    for k in [*range(len(table)), -1]:
        rows = np.flatnonzero(index == k)
        if len(rows) == 0:
            continue
        curve = live_curve(dev, rows)
        pair = (int(table[k, 0]), int(table[k, 1])) if k >= 0 else None
        peak_row = at_peak.get(pair, {"bytes": 0, "count": 0})
        pools.append(
            {
                "pool": list(pair) if pair is not None else None,
                "peak_bytes": peak_row["bytes"],
                "peak_count": peak_row["count"],
                "share": peak_row["bytes"] / total_at_peak if total_at_peak else 0.0,
                "max_bytes": int(curve.max()) if len(curve) else 0,
                "envelope": column_max(curve, width),
            }
        )
    pools.sort(key=lambda p: (p["pool"] is None, -p["peak_bytes"], p["pool"] or [0, 0]))
    return {
        "n_events": dev.n_events,
        "peak_event": peak,
        "pools": pools,
        "streams": stream_envelopes(dev, width),
        "segment_sizes": segment_size_envelopes(dev, width),
    }


def stream_envelopes(dev: DeviceTrace, width: int) -> list[StreamEnvelope]:
    """Per stream the allocations were made on (its handle in hex), as pool_envelopes
    does per pool; empty for a trace on one stream."""
    streams = np.unique(dev.alloc_stream)
    if len(streams) < 2:
        return []
    live = dev.live_at(dev.peak_event_index)
    total_at_peak = int(dev.alloc_size[live].sum())
    out: list[StreamEnvelope] = []
    for s in streams.tolist():
        curve = live_curve(dev, np.flatnonzero(dev.alloc_stream == s))
        at_peak = live[dev.alloc_stream[live] == s]
        peak_bytes = int(dev.alloc_size[at_peak].sum())
        out.append(
            {
                "stream": hex(dev.snapshot.streams[s]),
                "peak_bytes": peak_bytes,
                "peak_count": len(at_peak),
                "share": peak_bytes / total_at_peak if total_at_peak else 0.0,
                "max_bytes": int(curve.max()) if len(curve) else 0,
                "envelope": column_max(curve, width),
            }
        )
    return out

"""The viewer's find box: frame search and address search, as flags on a viewport's bands.

A frame query matches an allocation when any frame of its stack has the text in its function
name or file name (case-insensitive), as MemoryViz's frame filter; an address query (0x...)
matches the allocations whose [address, address + size) holds it. Both are answered for
the bands of one viewport (so pixel-bounded), plus, for an address, the first MAX_HITS
allocations anywhere in the trace that held it.
"""

from __future__ import annotations

import re

import numpy as np

from memlens.errors import MemlensError
from memlens.snapshot.model import DeviceTrace, Snapshot
from memlens.views.web.answers import AddressHits

MAX_QUERY = 200
MAX_HITS = 50
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{1,16}")


def parse_query(q: str) -> int | str:
    """An address (int) for 0x..., else the lower-cased text."""
    q = q.strip()
    if len(q) > MAX_QUERY:
        raise MemlensError(f"q must be at most {MAX_QUERY} characters")
    if _ADDRESS.fullmatch(q):
        return int(q, 16)
    return q.lower()


def matching_stacks(snap: Snapshot, text: str) -> np.ndarray:
    """bool per stack id: some frame's name or file name contains `text` (lower-cased)."""
    hit = np.fromiter((text in s.lower() for s in snap.strings), bool, len(snap.strings))
    f = snap.frames
    frame_hit = hit[f.name] | hit[f.filename]
    per_entry = frame_hit[snap.stacks.frame_ids].astype(np.int64)
    c = np.concatenate([[0], np.cumsum(per_entry)])
    off = snap.stacks.offsets
    return np.asarray((c[off[1:]] - c[off[:-1]]) > 0)


def band_matches(dev: DeviceTrace, rows: np.ndarray, query: int | str) -> np.ndarray:
    """bool per row of `rows`: it matches the query."""
    if isinstance(query, int):
        addr = dev.alloc_addr[rows].astype(np.uint64)
        end = addr + dev.alloc_size[rows].astype(np.uint64)
        return np.asarray((addr <= np.uint64(query)) & (np.uint64(query) < end))
    if not query:
        return np.zeros(len(rows), dtype=bool)
    stacks = matching_stacks(dev.snapshot, query)
    sid = dev.alloc_stack[rows]
    return np.asarray((sid >= 0) & stacks[np.maximum(sid, 0)]) if len(stacks) else sid < -1


def address_hits(dev: DeviceTrace, address: int) -> AddressHits:
    """The allocations anywhere in the trace whose range holds `address` (first MAX_HITS)."""
    addr = dev.alloc_addr.astype(np.uint64)
    end = addr + dev.alloc_size.astype(np.uint64)
    rows = np.flatnonzero((addr <= np.uint64(address)) & (np.uint64(address) < end))
    return {
        "total": int(len(rows)),
        "hits": [
            {
                "row": int(r),
                "address": f"0x{int(dev.alloc_addr[r]):x}",
                "size": int(dev.alloc_size[r]),
                "alloc_event": int(dev.alloc_event[r]),
                "free_event": int(dev.free_event[r]),
            }
            for r in rows[:MAX_HITS].tolist()
        ],
    }

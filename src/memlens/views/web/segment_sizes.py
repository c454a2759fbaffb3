"""Reserved memory split by segment size over the trace (MemoryViz's segment-size
envelopes): how much of what the allocator holds from CUDA sits in 2 MiB segments (the
small pool's, for requests up to 1 MiB), in 20 MiB ones (shared by requests of 1-10 MiB),
in segments of one large request each (other sizes), in expandable segments (mapped and
unmapped pages), and in segments made before the trace. Many 2 MiB or 20 MiB segments
that stay while active memory falls are where fragmentation lives.

The classes add up to the reserved curve exactly: a segment freed in the trace leaves the
class it was made in, or "before the trace" when its segment_alloc is not in the trace.
Only the segment events are walked (a few per thousand events).
"""

from __future__ import annotations

import numpy as np

from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace
from memlens.views.web.answers import SizeEnvelope

MiB = 1 << 20
CLASSES = ("2 MiB", "20 MiB", "other sizes", "expandable", "before the trace")


def column_max(curve: np.ndarray, width: int) -> list[int]:
    """The curve's maximum over each of `width` equal runs of events (at most one column
    per event)."""
    n = len(curve)
    if n == 0:
        return []
    starts = np.unique(np.linspace(0, n, num=min(width, n), endpoint=False).astype(np.int64))
    out: list[int] = np.maximum.reduceat(curve, starts).tolist()
    return out


def size_class(action: int, size: int) -> int:
    """Index into CLASSES of a segment event made in the trace."""
    if action in (Action.SEGMENT_MAP, Action.SEGMENT_UNMAP):
        return 3
    return 0 if size == 2 * MiB else 1 if size == 20 * MiB else 2


def segment_size_envelopes(dev: DeviceTrace, width: int) -> list[SizeEnvelope]:
    """Per class with any bytes: its reserved bytes after each event, reduced to `width`
    columns by their maximum; empty when one class holds everything (nothing to split)."""
    n = dev.n_events
    kinds = (Action.SEGMENT_ALLOC, Action.SEGMENT_FREE, Action.SEGMENT_MAP, Action.SEGMENT_UNMAP)
    events = np.flatnonzero(np.isin(dev.action, kinds))
    delta = np.zeros((len(CLASSES), n), dtype=np.int64)
    made: dict[int, int] = {}  # address -> class of a segment made in the trace, alive
    for e, action, addr, size in zip(
        events.tolist(),
        dev.action[events].tolist(),
        dev.addr[events].tolist(),
        dev.size[events].tolist(),
        strict=True,
    ):
        if action in (Action.SEGMENT_ALLOC, Action.SEGMENT_MAP):
            k = size_class(action, size)
            if action == Action.SEGMENT_ALLOC:
                made[addr] = k
            delta[k, e] += size
        elif action == Action.SEGMENT_UNMAP:
            delta[3, e] -= size
        else:
            delta[made.pop(addr, 4), e] -= size
    curves = np.cumsum(delta, axis=1)
    curves[4] += dev.reserved_start_bytes
    out: list[SizeEnvelope] = []
    for k, name in enumerate(CLASSES):
        curve = curves[k]
        top = int(curve.max()) if n else 0
        if top > 0:
            out.append({"size_class": name, "max_bytes": top, "envelope": column_max(curve, width)})
    return out if len(out) > 1 else []

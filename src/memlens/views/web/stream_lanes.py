"""Streams drawn apart in the main chart (MemoryViz's streams split): which traces get
lanes, and the lanes of a viewport as the API's answer. The layout is
memlens.views.layout.lanes; a trace on one stream is drawn as it always was.
"""

from __future__ import annotations

import numpy as np

from memlens.snapshot.model import DeviceTrace
from memlens.views.layout import View
from memlens.views.layout.lanes import MAX_LANES
from memlens.views.web.answers import Lane


def stream_lane_count(dev: DeviceTrace) -> int:
    """How many lanes split=stream draws: one per stream allocations were made on, 0 for a
    trace on one stream or on more than MAX_LANES (a bincount: cheap on the first paint's
    path)."""
    if dev.n_allocations == 0:
        return 0
    n = int(np.count_nonzero(np.bincount(np.asarray(dev.alloc_stream))))
    return n if 2 <= n <= MAX_LANES else 0


def lane_answers(v: View, streams: list[int]) -> list[Lane]:
    """The view's lanes for the page: each stream's handle (hex), bottom, height and
    aggregate band (the shape of the chart's `small`)."""
    lanes = v.lanes
    if lanes is None:
        return []
    out: list[Lane] = []
    for k, key in enumerate(lanes.keys.tolist()):
        out.append(
            {
                "stream": hex(streams[key]) if 0 <= key < len(streams) else hex(key),
                "base": int(lanes.base[k]),
                "top": int(lanes.top[k]),
                "small": {
                    "offset": lanes.small_offset[k].tolist(),
                    "bytes": lanes.small_bytes[k].tolist(),
                    "count": lanes.small_count[k].tolist(),
                    "max_size": int(v.small_max),
                    "min_size": int(v.small_min),
                    "cut_count": lanes.cut_count[k].tolist(),
                    "cut_bytes": lanes.cut_bytes[k].tolist(),
                },
            }
        )
    return out

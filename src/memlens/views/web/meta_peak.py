"""The meta answer's peak figures (what the chart marks before the header's summary
arrives), read from the layout's range-max pyramids instead of an argmax over every event.

On a warm start the pyramids are kept beside the column cache, so the whole trace's
maximum is O(log n) where DeviceTrace's peaks scan the active and reserved curves (0.1-0.2 s
each at 4M events on a loaded box, on the first paint's path); on a cold one the first
viewport builds them anyway. The figures are DeviceTrace's exactly: the leftmost maximum,
and the state before the first event (-1) when nothing rises above it.
"""

from __future__ import annotations

import numpy as np

from memlens.views.layout import DeviceLayout, RangeArgmax
from memlens.views.web.answers import MetaPeak


def _highest(index: RangeArgmax, after: np.ndarray, start: int) -> tuple[int, int]:
    """(the highest of `start` and the curve, the first event reaching it or -1)."""
    whole = index.query(np.zeros(1, np.int64), np.full(1, len(after), np.int64))
    i = int(whole[0])
    if i < 0 or start >= int(after[i]):
        return start, -1
    return int(after[i]), i


def chart_peak(lay: DeviceLayout, has_time: bool) -> MetaPeak:
    """Peak active bytes, its event and time, and peak reserved bytes of a device."""
    dev = lay.dev
    active, event = _highest(lay.active_max, dev.active_after, dev.baseline_bytes)
    reserved, _ = _highest(lay.reserved_max, dev.reserved_after, dev.reserved_start_bytes)
    return {
        "peak_event_index": event,
        "peak_time_us": int(dev.time_us[event]) if has_time and event >= 0 else None,
        "peak_active_bytes": active,
        "peak_reserved_bytes": reserved,
    }

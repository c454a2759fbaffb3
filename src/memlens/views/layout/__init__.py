"""Level-of-detail layout of the Active Memory Timeline, shared by the viewer and the report.

`viewport` samples one viewport at pixel-column resolution; `index` holds the two indexes it
queries (range maxima of the curves, rows alive at an event).
"""

from memlens.views.layout.index import LiveIndex, RangeArgmax
from memlens.views.layout.viewport import (
    MAX_DETAIL_RUNS,
    MAX_HEIGHT,
    MAX_WIDTH,
    DeviceLayout,
    View,
    time_range,
)

__all__ = [
    "MAX_DETAIL_RUNS",
    "MAX_HEIGHT",
    "MAX_WIDTH",
    "DeviceLayout",
    "LiveIndex",
    "RangeArgmax",
    "View",
    "time_range",
]

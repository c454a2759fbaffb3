"""Analysis results are JSON-able dicts, but a numpy scalar or array can slip into one:
this converter lets `json.dumps(default=...)` write them as plain numbers and lists."""

from __future__ import annotations

from typing import Any

import numpy as np


def json_default(o: Any) -> Any:
    """`default=` for json.dump(s): numpy integers, floats and arrays as Python values."""
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")

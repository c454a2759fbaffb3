"""Words shared by `memlens plan`'s text and its HTML page: a point's values, and whether
it fits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def values_text(values: Mapping[str, Any]) -> str:
    """`--batch-size=4 BATCH=8`; the script as given when nothing was swept."""
    shown = (f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
    return " ".join(shown) or "(as given)"


def fits_text(p: Mapping[str, Any]) -> str:
    """fits, OOM (ran out of the usable memory), no, failed, or - (no capacity given)."""
    if p["error"] is not None:
        return "failed"
    return {True: "fits", False: "OOM" if p["oom"] else "no", None: "-"}[p["fits"]]

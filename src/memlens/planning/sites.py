"""Bytes per call site at a run's peak, kept with a plan point's figures (a few hundred
rows, JSON), and the change per site between two runs: `memlens diff`'s site rows
(analysis.diff) for two simulations of one script, joined by the site's key."""

from __future__ import annotations

from typing import TypedDict

from memlens.analysis.diff import sites_at_peak
from memlens.analysis.matching import key_text
from memlens.analysis.results import SiteChange
from memlens.analysis.sites import frame_dict, frame_label
from memlens.snapshot.model import DeviceTrace


class PeakSite(TypedDict):
    key: str  # analysis.matching.key_text: function (path:line), machine-independent
    site: str
    filename: str | None
    line: int | None
    name: str | None
    bytes: int  # live at the peak
    count: int


def peak_sites(dev: DeviceTrace) -> list[PeakSite]:
    """analysis.diff's per-site bytes at the peak, as plain rows."""
    _, side = sites_at_peak(dev, None)
    return [
        {
            "key": key_text(key),
            "site": frame_label(dev.snapshot, f),
            **frame_dict(dev.snapshot, f),
            "bytes": b,
            "count": c,
        }
        for key, (b, c, f) in side.items()
    ]


def site_changes(a: list[PeakSite], b: list[PeakSite], limit: int) -> list[SiteChange]:
    """The sites whose bytes at the peak changed most from `a` to `b` (largest |change|
    first, unchanged ones left out), as `memlens diff`'s rows."""
    ia, ib = {s["key"]: s for s in a}, {s["key"]: s for s in b}
    rows: list[SiteChange] = []
    for key in [*ia, *(k for k in ib if k not in ia)]:
        x, y = ia.get(key), ib.get(key)
        ref = x if x is not None else y
        assert ref is not None
        change = (y["bytes"] if y else 0) - (x["bytes"] if x else 0)
        if change == 0:
            continue
        rows.append(
            {
                "site": ref["site"],
                "filename": ref["filename"],
                "line": ref["line"],
                "name": ref["name"],
                "a_bytes": x["bytes"] if x else 0,
                "b_bytes": y["bytes"] if y else 0,
                "change": change,
                "a_count": x["count"] if x else 0,
                "b_count": y["count"] if y else 0,
                "status": "both" if x and y else ("only_a" if x else "only_b"),
                "key": key,
            }
        )
    rows.sort(key=lambda r: (-abs(r["change"]), r["site"]))
    return rows[:limit]

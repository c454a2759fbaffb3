"""Diff of two snapshots (A = before/base, B = after): headline figures, per call site
bytes at each peak and the change (sites in both are compared by size, not just set
difference), and stage by stage when both have annotations (matched by name and
occurrence)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from memlens.analysis.results import DiffResult, Figure, SiteChange, StageChange
from memlens.analysis.sites import top_sites
from memlens.snapshot.model import DeviceTrace

FIGURES: tuple[tuple[str, Callable[[DeviceTrace], int]], ...] = (
    ("peak_active_bytes", lambda d: d.peak_active_bytes),
    ("peak_reserved_bytes", lambda d: d.peak_reserved_bytes),
    ("baseline_bytes", lambda d: d.baseline_bytes),
    ("end_active_bytes", lambda d: d.end_active_bytes),
    ("end_reserved_bytes", lambda d: d.end_reserved_bytes),
    ("trace_entries", lambda d: d.n_events),
)


def pct(a: int, b: int) -> float | None:
    return None if a == 0 else 100.0 * (b - a) / a


def diff(
    a: DeviceTrace,
    b: DeviceTrace,
    *,
    limit: int | None = 30,
    hide_patterns: Sequence[str] | None = None,
    stages: bool = True,
) -> DiffResult:
    """Compare two device traces (A = base, B = new).

    Returns {"a": {"source", "device"}, "b": {...}, "figures": [{"name" (peak_active_bytes,
    peak_reserved_bytes, baseline_bytes, end_active_bytes, end_reserved_bytes,
    trace_entries), "a", "b", "change", "change_pct" (None when a == 0)}],
    "sites": [{"site", "filename", "line", "name", "a_bytes", "b_bytes", "change",
    "a_count", "b_count", "status": "both"|"only_a"|"only_b"}] (largest |change| first,
    at most `limit`), "sites_total" (distinct sites), "stages": [{"name", "occurrence",
    "a_peak_bytes", "b_peak_bytes", "peak_change", "a_net_bytes", "b_net_bytes",
    "net_change", "status"}] or None when either side has no stages (or stages=False: the
    viewer's compare page shows no stages and skips their cost)}.
    Sites are matched by the first user frame's text ("function (file:line)").
    """
    figures: list[Figure] = []
    for name, get in FIGURES:
        va, vb = int(get(a)), int(get(b))
        figures.append(
            {"name": name, "a": va, "b": vb, "change": vb - va, "change_pct": pct(va, vb)}
        )
    sa = {s["site"]: s for s in top_sites(a, a.live_at(a.peak_event_index), limit=None,
                                          hide_patterns=hide_patterns)}  # fmt: skip
    sb = {s["site"]: s for s in top_sites(b, b.live_at(b.peak_event_index), limit=None,
                                          hide_patterns=hide_patterns)}  # fmt: skip
    sites: list[SiteChange] = []
    for key in sa.keys() | sb.keys():
        x, y = sa.get(key), sb.get(key)
        ref = x or sb[key]  # the site is on one side at least
        ab, bb = (x["bytes"] if x else 0), (y["bytes"] if y else 0)
        sites.append(
            {
                "site": key,
                "filename": ref["filename"],
                "line": ref["line"],
                "name": ref["name"],
                "a_bytes": ab,
                "b_bytes": bb,
                "change": bb - ab,
                "a_count": x["count"] if x else 0,
                "b_count": y["count"] if y else 0,
                "status": "both" if x and y else ("only_a" if x else "only_b"),
            }
        )
    sites.sort(key=lambda r: (-abs(r["change"]), -max(r["a_bytes"], r["b_bytes"]), r["site"]))
    return {
        "a": {"source": a.snapshot.source, "device": a.device},
        "b": {"source": b.snapshot.source, "device": b.device},
        "figures": figures,
        "sites": sites if limit is None else sites[:limit],
        "sites_total": len(sites),
        "stages": stage_diff(a, b) if stages else None,
    }


def stage_diff(a: DeviceTrace, b: DeviceTrace) -> list[StageChange] | None:
    """Stages matched by (name, occurrence); None unless both sides have stages."""
    from memlens.analysis.stages import stage_table

    ta = stage_table(a, top=0)["stages"]
    tb = stage_table(b, top=0)["stages"]
    if not ta or not tb:
        return None
    ia = {(s["name"], s["occurrence"]): s for s in ta}
    ib = {(s["name"], s["occurrence"]): s for s in tb}
    keys = [k for k in ia] + [k for k in ib if k not in ia]
    out: list[StageChange] = []
    for k in keys:
        x, y = ia.get(k), ib.get(k)
        out.append(
            {
                "name": k[0],
                "occurrence": k[1],
                "a_peak_bytes": x["peak_bytes"] if x else None,
                "b_peak_bytes": y["peak_bytes"] if y else None,
                "peak_change": y["peak_bytes"] - x["peak_bytes"] if x and y else None,
                "a_net_bytes": x["net_bytes"] if x else None,
                "b_net_bytes": y["net_bytes"] if y else None,
                "net_change": y["net_bytes"] - x["net_bytes"] if x and y else None,
                "status": "both" if x and y else ("only_a" if x else "only_b"),
            }
        )
    return out

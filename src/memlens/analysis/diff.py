"""Diff of two snapshots (A = before/base, B = after): headline figures, per call site
bytes at each peak and the change (sites in both are compared by size, not just set
difference), and stage by stage when both have annotations (matched by name and
occurrence)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from memlens.analysis.matching import SiteKey, key_text, same_site, site_key
from memlens.analysis.results import DiffResult, Figure, SiteChange, StageChange
from memlens.analysis.sites import frame_dict, frame_label, site_of_allocations
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
    top: int | None = 20,
    hide_patterns: Sequence[str] | None = None,
    stages: bool = True,
) -> DiffResult:
    """Compare two device traces (A = base, B = new).

    Returns {"a": {"source", "device"}, "b": {...}, "figures": [{"name" (peak_active_bytes,
    peak_reserved_bytes, baseline_bytes, end_active_bytes, end_reserved_bytes,
    trace_entries), "a", "b", "change", "change_pct" (None when a == 0)}],
    "sites": [{"site", "filename", "line", "name", "a_bytes", "b_bytes", "change",
    "a_count", "b_count", "status": "both"|"only_a"|"only_b", "key"}] (largest |change| first,
    at most `top`), "sites_total" (distinct sites), "stages": [{"name", "occurrence",
    "a_peak_bytes", "b_peak_bytes", "peak_change", "a_net_bytes", "b_net_bytes",
    "net_change", "status"}] or None when either side has no stages (or stages=False: the
    viewer's compare page shows no stages and skips their cost)}.
    Sites are matched by their machine-independent key (analysis.matching.site_key:
    function, path inside its package or project, line), so two machines' recordings of
    one code compare; each row gives that "key" and A's exact site, filename and line (B's
    when only in B).
    """
    figures: list[Figure] = []
    for name, get in FIGURES:
        va, vb = int(get(a)), int(get(b))
        figures.append(
            {"name": name, "a": va, "b": vb, "change": vb - va, "change_pct": pct(va, vb)}
        )
    sites = match_sites(sites_at_peak(a, hide_patterns), sites_at_peak(b, hide_patterns))
    sites.sort(key=lambda r: (-abs(r["change"]), -max(r["a_bytes"], r["b_bytes"]), r["site"]))
    return {
        "a": {"source": a.snapshot.source, "device": a.device},
        "b": {"source": b.snapshot.source, "device": b.device},
        "figures": figures,
        "sites": sites if top is None else sites[:top],
        "sites_total": len(sites),
        "stages": stage_diff(a, b) if stages else None,
    }


# one side's sites: key -> (bytes, count, a representative frame row: label and Frame)
SideSites = dict[SiteKey, tuple[int, int, int]]


def sites_at_peak(
    dev: DeviceTrace, hide_patterns: Sequence[str] | None
) -> tuple[DeviceTrace, SideSites]:
    """Live bytes and count at the peak per site key (frames sharing a key are summed; the
    largest names the row)."""
    rows = dev.live_at(dev.peak_event_index)
    site = site_of_allocations(dev, rows, hide_patterns)
    uniq, inv = np.unique(site, return_inverse=True)
    total = np.bincount(inv, weights=dev.alloc_size[rows], minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    out: SideSites = {}
    for k in np.argsort(-total, kind="stable").tolist():  # per distinct site, not allocation
        key = site_key(dev.snapshot, int(uniq[k]))
        b, c, f = out.get(key, (0, 0, int(uniq[k])))
        out[key] = (b + int(total[k]), c + int(count[k]), f)
    return dev, out


def match_sites(
    side_a: tuple[DeviceTrace, SideSites], side_b: tuple[DeviceTrace, SideSites]
) -> list[SiteChange]:
    """Rows of the diff: keys equal on both sides, then keys left on one side paired with
    the only key of the other that is the same site under another project root."""
    (da, sa), (db, sb) = side_a, side_b
    pairs: list[tuple[SiteKey | None, SiteKey | None]] = [(k, k) for k in sa if k in sb]
    lone_a = [k for k in sa if k not in sb]
    lone_b = [k for k in sb if k not in sa]
    by_name_line: dict[tuple[str, int], list[SiteKey]] = {}
    for k in lone_b:
        by_name_line.setdefault((k[0], k[2]), []).append(k)
    a_by_name_line: dict[tuple[str, int], list[SiteKey]] = {}
    for k in lone_a:
        a_by_name_line.setdefault((k[0], k[2]), []).append(k)
    taken: set[SiteKey] = set()
    for k in lone_a:
        cands = [kb for kb in by_name_line.get((k[0], k[2]), []) if same_site(k, kb)]
        rivals = [ka for ka in a_by_name_line[(k[0], k[2])] if cands and same_site(ka, cands[0])]
        if len(cands) == 1 and len(rivals) == 1 and cands[0] not in taken:
            taken.add(cands[0])
            pairs.append((k, cands[0]))
        else:
            pairs.append((k, None))
    pairs += [(None, k) for k in lone_b if k not in taken]
    rows: list[SiteChange] = []
    for ka, kb in pairs:
        x = sa[ka] if ka is not None else None
        y = sb[kb] if kb is not None else None
        dev, ref, key = (da, x, ka) if x is not None and ka is not None else (db, y, kb)
        assert ref is not None and key is not None  # one side at least
        short = ka if kb is None else kb if ka is None else min(ka, kb, key=lambda q: len(q[1]))
        ab, bb = (x[0] if x else 0), (y[0] if y else 0)
        rows.append(
            {
                "site": frame_label(dev.snapshot, ref[2]),
                **frame_dict(dev.snapshot, ref[2]),
                "a_bytes": ab,
                "b_bytes": bb,
                "change": bb - ab,
                "a_count": x[1] if x else 0,
                "b_count": y[1] if y else 0,
                "status": "both" if x and y else ("only_a" if x else "only_b"),
                "key": key_text(short or key),
            }
        )
    return rows


def stage_diff(a: DeviceTrace, b: DeviceTrace) -> list[StageChange] | None:
    """Stages matched by (name, occurrence); None unless both sides have stages. Steps
    inferred from the trace are compared only when both sides have them (an annotated
    run and an unannotated one share no stage names)."""
    from memlens.analysis.stages import stage_table

    ta = stage_table(a, top=0)["stages"]
    tb = stage_table(b, top=0)["stages"]
    if not (any(s["inferred"] for s in ta) and any(s["inferred"] for s in tb)):
        ta, tb = [s for s in ta if not s["inferred"]], [s for s in tb if not s["inferred"]]
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

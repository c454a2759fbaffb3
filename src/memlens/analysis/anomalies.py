"""Anomalies worth a look:

* late frees: free_completed long after free_requested (the block was used on another
  stream, record_stream, so the allocator had to wait) — time and events in between;
* large short-lived temporaries: at least `temp_min` bytes (and `temp_min_share` of the
  peak) alive for at most `temp_events` events;
* reserved far above active: stretches where reserved - active exceeds both
  `gap_min` bytes and `gap_ratio` x active.

The keywords are `memlens anomalies`'s options (sizes as written, "64MiB", or bytes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.events import has_time
from memlens.analysis.peak import allocation_rows
from memlens.analysis.results import (
    AnomaliesResult,
    GapStretch,
    LargeTemporaries,
    LargeTemporary,
    LateFree,
    LateFrees,
)
from memlens.analysis.sites import top_sites
from memlens.snapshot.model import DeviceTrace
from memlens.units import parse_bytes


def anomalies(
    dev: DeviceTrace,
    *,
    late_events: int = 2,
    late_us: int = 0,
    temp_min: str | int = "64MiB",
    temp_events: int = 8,
    gap_min: str | int = "1GiB",
    gap_ratio: float = 0.5,
    top: int = 10,
    hide_patterns: Sequence[str] | None = None,
    temp_min_share: float = 0.01,
) -> AnomaliesResult:
    """Returns {"device", "late_frees": {"count", "bytes", "items": [allocation_rows +
    "delay_events", "delay_us"], "by_site": [...]}, "large_temporaries": {"count",
    "bytes", "items": [allocation_rows + "lifetime_events"], "by_site": [...]},
    "reserved_gaps": {"max_gap_bytes", "max_gap_event", "count", "stretches":
    [{"first_event", "last_event", "max_gap_bytes", "max_gap_event", "active_bytes",
    "reserved_bytes"} (at the stretch's largest gap)]}, "thresholds": {...}}.

    late free: free_completed >= late_events events after free_requested (2: some other
    event came in between; a plain free completes at the very next event) and, when the
    trace is timed, >= late_us later. large temporary: freed inside the trace, alive <=
    temp_events events, and at least max(temp_min, temp_min_share x peak active) bytes.
    reserved gap: reserved - active > max(gap_min, gap_ratio x active); consecutive events
    over the line form one stretch. Items: largest first, `top` of each kind.
    """
    temp_min_bytes, gap_min_bytes = parse_bytes(temp_min), parse_bytes(gap_min)
    n = dev.n_events
    timed = has_time(dev)
    req, fr = dev.free_requested_event, dev.free_event
    # --- late frees ------------------------------------------------------------------
    cand = np.flatnonzero((req >= 0) & (fr < n) & (fr - req >= late_events))
    delay_us = np.zeros(len(cand), dtype=np.int64)
    if timed and len(cand):
        delay_us = dev.time_us[fr[cand]] - dev.time_us[req[cand]]
        keep = delay_us >= late_us
        cand, delay_us = cand[keep], delay_us[keep]
    order = np.lexsort((cand, -(fr[cand] - req[cand])))
    items: list[LateFree] = [
        {**it, "delay_events": int(fr[r] - req[r]), "delay_us": int(delay_us[j]) if timed else None}
        for it, j, r in zip(
            allocation_rows(dev, cand[order][:top], hide_patterns),
            order[:top].tolist(),
            cand[order][:top].tolist(),
        )
    ]
    late: LateFrees = {
        "count": int(len(cand)),
        "bytes": int(dev.alloc_size[cand].sum()),
        "items": items,
        "by_site": top_sites(dev, cand, top=top, hide_patterns=hide_patterns),
    }
    # --- large short-lived temporaries ----------------------------------------------------
    floor = max(int(temp_min_bytes), int(temp_min_share * dev.peak_active_bytes))
    made = dev.alloc_event >= 0
    life = fr - dev.alloc_event
    tmp = np.flatnonzero(made & (fr < n) & (life <= temp_events) & (dev.alloc_size >= floor))
    order = np.lexsort((tmp, -dev.alloc_size[tmp]))
    t_items: list[LargeTemporary] = [
        {**it, "lifetime_events": int(life[it["row"]])}
        for it in allocation_rows(dev, tmp[order][:top], hide_patterns)
    ]
    temps: LargeTemporaries = {
        "count": int(len(tmp)),
        "bytes": int(dev.alloc_size[tmp].sum()),
        "min_bytes": floor,
        "items": t_items,
        "by_site": top_sites(dev, tmp, top=top, hide_patterns=hide_patterns),
    }
    # --- reserved far above active --------------------------------------------------------
    stretches: list[GapStretch] = []
    max_gap, max_gap_ev = 0, -1
    if n:
        gap = dev.reserved_after - dev.active_after
        max_gap_ev = int(np.argmax(gap))
        max_gap = int(gap[max_gap_ev])
        over = gap > np.maximum(gap_min_bytes, gap_ratio * dev.active_after)
        if over.any():
            edges = np.diff(np.concatenate([[0], over.astype(np.int8), [0]]))
            starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
            for a, b in zip(starts.tolist(), stops.tolist()):
                k = a + int(np.argmax(gap[a:b]))
                stretches.append(
                    {
                        "first_event": a,
                        "last_event": b - 1,
                        "max_gap_bytes": int(gap[k]),
                        "max_gap_event": k,
                        "active_bytes": int(dev.active_after[k]),
                        "reserved_bytes": int(dev.reserved_after[k]),
                    }
                )
    n_stretch = len(stretches)
    stretches.sort(key=lambda s: (-s["max_gap_bytes"], s["first_event"]))
    return {
        "device": dev.device,
        "late_frees": late,
        "large_temporaries": temps,
        "reserved_gaps": {
            "max_gap_bytes": max_gap,
            "max_gap_event": max_gap_ev,
            "count": n_stretch,
            "stretches": stretches[:top],
        },
        "thresholds": {
            "late_min_events": late_events,
            "late_min_us": late_us if timed else None,
            "temp_min_bytes": floor,
            "temp_max_events": temp_events,
            "gap_min_bytes": gap_min_bytes,
            "gap_ratio": gap_ratio,
        },
    }

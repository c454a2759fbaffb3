"""Several devices or ranks: one summary across the devices of one snapshot and/or across
several snapshot files (one per rank): peak per rank, imbalance, sites that differ."""

from __future__ import annotations

from collections.abc import Sequence

from memlens.analysis.devices import traced_devices
from memlens.analysis.results import Imbalance, RankRow, RankSite, RanksResult
from memlens.analysis.sites import top_sites
from memlens.snapshot.model import DeviceTrace, Snapshot


def ranks(
    traces: Sequence[tuple[str, DeviceTrace]],
    *,
    top: int = 15,
    hide_patterns: Sequence[str] | None = None,
) -> RanksResult:
    """`traces`: (label, device trace) pairs, e.g. ("rank0.pickle:0", dev).

    Returns {"ranks": [{"label", "source", "device", "peak_active_bytes",
    "peak_event", "peak_reserved_bytes", "baseline_bytes", "end_active_bytes",
    "trace_entries"}], "imbalance": {"peak_max_bytes", "peak_min_bytes",
    "peak_mean_bytes", "spread_bytes" (max - min), "max_over_mean", "max_label",
    "min_label"} (None without traces), "sites": [{"site", "bytes": [per rank, live at
    that rank's peak], "spread_bytes"}] (sites whose bytes differ, largest spread first)}.
    """
    rows: list[RankRow] = []
    site_bytes: dict[str, list[int]] = {}
    for j, (label, dev) in enumerate(traces):
        rows.append(
            {
                "label": label,
                "source": dev.snapshot.source,
                "device": dev.device,
                "peak_active_bytes": dev.peak_active_bytes,
                "peak_event": dev.peak_event_index,
                "peak_reserved_bytes": dev.peak_reserved_bytes,
                "baseline_bytes": dev.baseline_bytes,
                "end_active_bytes": dev.end_active_bytes,
                "trace_entries": dev.n_events,
            }
        )
        live = dev.live_at(dev.peak_event_index)
        for s in top_sites(dev, live, top=None, hide_patterns=hide_patterns):
            site_bytes.setdefault(s["site"], [0] * len(traces))[j] = s["bytes"]
    imbalance: Imbalance | None = None
    if rows:
        peaks = [r["peak_active_bytes"] for r in rows]
        hi, lo = max(peaks), min(peaks)
        mean = sum(peaks) / len(peaks)
        imbalance = {
            "peak_max_bytes": hi,
            "peak_min_bytes": lo,
            "peak_mean_bytes": int(round(mean)),
            "spread_bytes": hi - lo,
            "max_over_mean": round(hi / mean, 6) if mean else None,
            "max_label": rows[peaks.index(hi)]["label"],
            "min_label": rows[peaks.index(lo)]["label"],
        }
    sites: list[RankSite] = [
        {"site": k, "bytes": v, "spread_bytes": max(v) - min(v)}
        for k, v in site_bytes.items()
        if max(v) != min(v)
    ]
    sites.sort(key=lambda s: (-s["spread_bytes"], s["site"]))
    return {"ranks": rows, "imbalance": imbalance, "sites": sites[:top]}


def traces_of(
    snapshots: Sequence[tuple[str, Snapshot]], device: int | None = None
) -> list[tuple[str, DeviceTrace]]:
    """(name, snapshot) pairs -> device traces labelled "name:device" (every device the
    snapshot has a trace for, even an empty one, or only `device`)."""
    out = []
    for name, snap in snapshots:
        for d in traced_devices(snap, device):
            out.append((f"{name}:{d}", snap.device(d)))
    return out


def ranks_output(
    snapshots: Sequence[tuple[str, Snapshot]],
    *,
    top: int = 15,
    device: int | None = None,
    hide_patterns: Sequence[str] | None = None,
) -> RanksResult:
    """`memlens ranks`: ranks() over every traced device of each (name, snapshot), or only
    `device`; MemlensError when none has a trace."""
    from memlens.errors import MemlensError

    traces = traces_of(snapshots, device)
    if not traces:
        raise MemlensError("no device with trace entries in the given snapshot(s)")
    return ranks(traces, top=top, hide_patterns=hide_patterns)

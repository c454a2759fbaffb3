"""The headline figures of a snapshot (`memlens summary`; the viewer's and the report's
overview): devices, time span, baseline, peak, end state, top sites, OOM entries.

The JSON schema is documented in docs/json-schema.md and kept stable: fields are only
ever added. The text is views/text/summary.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from memlens.analysis.oom import oom_entries
from memlens.analysis.pools import pool_bytes_at, private_pools
from memlens.analysis.results import DeviceSummary, Summary
from memlens.analysis.sites import top_sites
from memlens.analysis.stages import annotation_rows_for
from memlens.snapshot.model import GHOST, PREEXISTING, DeviceTrace, Snapshot

SUMMARY_SCHEMA_VERSION = 1
_NOTABLE_DEFAULTS = {
    "expandable_segments": False,
    "max_split_size": -1,
    "garbage_collection_threshold": 0.0,
    "release_lock_on_cudamalloc": False,
    "pinned_use_cuda_host_register": False,
    "trace_alloc_overflowed": False,
}


def notable_settings(settings: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if k == "PYTORCH_CUDA_ALLOC_CONF":
            if v:
                out[k] = v
        elif k == "roundup_power2_divisions":
            if isinstance(v, dict) and any(x for x in v.values()):
                out[k] = {kk: vv for kk, vv in v.items() if vv}
        elif k in _NOTABLE_DEFAULTS and v != _NOTABLE_DEFAULTS[k]:
            # SIZE_MAX (2**64-1) also means "unset" for max_split_size in newer builds
            if k == "max_split_size" and isinstance(v, int) and v >= 2**63 - 1:
                continue
            out[k] = v
    return out


def _action_counts(snap: Snapshot, dev: DeviceTrace) -> dict[str, int]:
    counts = np.bincount(dev.action, minlength=1)  # uint8 codes: a 256-slot histogram
    return {snap.action_name(c): int(counts[c]) for c in np.flatnonzero(counts).tolist()}


def device_summary(
    dev: DeviceTrace, *, top: int = 10, hide_patterns: Sequence[str] | None = None
) -> DeviceSummary:
    snap = dev.snapshot
    n = dev.n_events
    has_time = n > 0 and bool(dev.time_us[0] >= 0)
    flags = dev.alloc_flags
    orphan = int(np.count_nonzero(((flags & PREEXISTING) != 0) & ((flags & GHOST) == 0)))
    ghost = int(np.count_nonzero(flags & GHOST))
    settings = snap.allocator_settings
    max_entries = settings.get("trace_alloc_max_entries")
    truncated = bool(settings.get("trace_alloc_overflowed")) or (
        isinstance(max_entries, int) and max_entries > 1 and n >= max_entries
    )
    peak_i = dev.peak_event_index
    rows = dev.live_at(peak_i)
    ann = snap.annotations
    return {
        "device": dev.device,
        "trace_entries": n,
        "actions": _action_counts(snap, dev),
        # first and last in time, not in trace order: a file's clock may run backwards, and
        # a span is never negative
        "time_start_us": int(dev.time_us.min()) if has_time else None,
        "time_end_us": int(dev.time_us.max()) if has_time else None,
        "duration_s": (int(dev.time_us.max()) - int(dev.time_us.min())) / 1e6 if has_time else None,
        "truncated": truncated,
        "starts_mid_run": orphan > 0,
        "preexisting_freed_in_trace": orphan,
        "preexisting_alive_throughout": ghost,
        "baseline_bytes": dev.baseline_bytes,
        "peak_active_bytes": dev.peak_active_bytes,
        "peak_event_index": peak_i,
        "peak_time_us": int(dev.time_us[peak_i]) if has_time and peak_i >= 0 else None,
        "end_active_bytes": dev.end_active_bytes,
        "reserved_start_bytes": dev.reserved_start_bytes,
        "peak_reserved_bytes": dev.peak_reserved_bytes,
        "peak_reserved_event_index": dev.peak_reserved_event_index,
        "end_reserved_bytes": dev.end_reserved_bytes,
        "allocations": dev.n_allocations,
        "live_at_peak": int(len(rows)),
        "streams": int(np.count_nonzero(np.bincount(dev.stream))) if n else 0,
        # the annotations `stages` pairs for this device (all when none carry its ordinal)
        "annotations": len(annotation_rows_for(dev)) if len(ann) else 0,
        "top_sites": top_sites(dev, rows, top=top, hide_patterns=hide_patterns),
        "ooms": oom_entries(dev),
        "pools_at_peak": pool_bytes_at(dev, peak_i),
        "private_pools": private_pools(dev),
    }


def summarize(
    snap: Snapshot,
    device: int | None = None,
    *,
    top: int = 10,
    hide_patterns: Sequence[str] | None = None,
) -> Summary:
    devices = [device] if device is not None else snap.devices
    return {
        "schema": SUMMARY_SCHEMA_VERSION,
        "source": snap.source,
        "devices": [
            device_summary(snap.device(d), top=top, hide_patterns=hide_patterns) for d in devices
        ],
        "annotations": len(snap.annotations),
        "allocator_settings": notable_settings(snap.allocator_settings),
        "format_notes": list(snap.format_notes),
        "warnings": list(snap.warnings),
    }

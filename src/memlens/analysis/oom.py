"""OOM events: for each `oom` trace entry, the request, the free memory the driver
reported (dev.addr holds device_free for oom entries), what was live, fragmentation at that
moment and the top sites."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.allocator_state import state_at
from memlens.analysis.devices import traced_devices
from memlens.analysis.events import time_of
from memlens.analysis.results import OomDetail, OomEntry, OomOutput, OomReport
from memlens.analysis.sites import frame_label, top_sites, user_frame_of_stacks
from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace, Snapshot
from memlens.units import parse_bytes


def oom_entries(dev: DeviceTrace, limit: int | None = None) -> list[OomEntry]:
    """The trace's `oom` entries, light: {"event", "time_us", "requested_bytes" (the rounded
    size that failed), "device_free_bytes" (what the driver reported)}; the first `limit`."""
    events = np.flatnonzero(dev.action == Action.OOM)[:limit]
    return [
        {
            "event": e,
            "time_us": time_of(dev, e),
            "requested_bytes": int(dev.size[e]),
            "device_free_bytes": int(dev.addr[e]),
        }
        for e in events.tolist()
    ]


# Memory of the device a process never sees as free or reserved even when alone on it: the
# CUDA context, cuBLAS/cuDNN workspaces, NCCL buffers (typically 0.3 to 1 GiB).
CONTEXT_ALLOWANCE = 1 << 30


def oom_verdict(
    requested: int,
    device_free: int,
    reserved_unused: int,
    largest_free: int,
    reserved: int,
    device_memory: int | None = None,
) -> tuple[str, int | None]:
    """(why the request failed, bytes held outside this process or None when the device's
    size is not given). The caching allocator, before it gives up, frees its cached
    segments that hold nothing and asks the driver again, so:

    * "stream_or_pool": a cached free block was large enough: it belongs to another stream
      or a private pool (a CUDA graph's), where this request may not use it;
    * "fragmentation": the driver's free memory plus the cache's unused bytes would hold
      the request, but the unused bytes lie in segments that also hold live blocks;
    * "another_process": (with device_memory) more than a CUDA context's worth of the device
      is held outside this process, and without it the request would have fit;
    * "device_full": this process's live tensors leave no room for it."""
    outside = None
    if device_memory is not None:
        outside = max(device_memory - reserved - device_free, 0)
    if largest_free >= requested:
        return "stream_or_pool", outside
    if device_free + reserved_unused >= requested:
        return "fragmentation", outside
    if (
        outside is not None
        and outside - CONTEXT_ALLOWANCE >= requested - device_free - reserved_unused
    ):
        return "another_process", outside
    return "device_full", outside


def oom_report(
    dev: DeviceTrace,
    *,
    top: int = 10,
    hide_patterns: Sequence[str] | None = None,
    device_memory: int | None = None,
) -> OomReport:
    """Returns {"device", "count", "ooms": [{"event", "time_us", "requested_bytes" (the
    rounded size that failed), "device_free_bytes" (cudaMemGetInfo free, from the entry),
    "active_bytes", "reserved_bytes", "reserved_unused_bytes" (reserved - active: cached
    but not usable for this request), "free_in_segments_bytes", "largest_free_bytes",
    "fits_in_a_free_block" (bool), "n_segments", "live_count", "top_sites" (live at the
    OOM), "site" (where the failing request was made, if its stack was recorded),
    "verdict" and "outside_bytes" (oom_verdict; device_memory: the GPU's size, when known)}]}.
    The state is right before the OOM entry (the failed request allocated nothing).
    """
    ufs = user_frame_of_stacks(dev.snapshot, hide_patterns)
    ooms: list[OomDetail] = []
    for entry in oom_entries(dev):
        e, req = entry["event"], entry["requested_bytes"]
        st = state_at(dev, e, blocks=False)
        rows = dev.live_at(e)
        sid = int(dev.stack[e])
        unused = st["reserved_bytes"] - st["active_bytes"]
        verdict, outside = oom_verdict(
            req,
            entry["device_free_bytes"],
            unused,
            st["largest_free_bytes"],
            st["reserved_bytes"],
            device_memory,
        )
        ooms.append(
            {
                **entry,
                "active_bytes": st["active_bytes"],
                "reserved_bytes": st["reserved_bytes"],
                "reserved_unused_bytes": unused,
                "free_in_segments_bytes": st["free_bytes"],
                "largest_free_bytes": st["largest_free_bytes"],
                "fits_in_a_free_block": st["largest_free_bytes"] >= req,
                "n_segments": st["n_segments"],
                "live_count": int(len(rows)),
                "top_sites": top_sites(dev, rows, top=top, hide_patterns=hide_patterns),
                "site": frame_label(dev.snapshot, int(ufs[sid])) if sid >= 0 else None,
                "verdict": verdict,
                "outside_bytes": outside,
            }
        )
    return {"device": dev.device, "count": len(ooms), "ooms": ooms}


def oom_output(
    snap: Snapshot,
    *,
    top: int = 10,
    device: int | None = None,
    hide_patterns: Sequence[str] | None = None,
    device_memory: str | int | None = None,
) -> OomOutput:
    """`memlens oom`: oom_report of `device`, or of every device with a trace.
    device_memory: the GPU's size ("80GiB" or bytes), for the verdict."""
    size = None if device_memory is None else parse_bytes(device_memory)
    return {
        "source": snap.source,
        "devices": [
            oom_report(snap.device(d), top=top, hide_patterns=hide_patterns, device_memory=size)
            for d in traced_devices(snap, device)
        ],
    }

"""Call sites: who allocated the bytes, by first user frame."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memlens.analysis.events import memo
from memlens.analysis.results import Frame, NetSite, Site
from memlens.snapshot.frames import PYTHON, first_user_frames, short_cpp_name
from memlens.snapshot.model import DeviceTrace, Snapshot

# The two names of allocations without a site frame, the same in every view: no stack
# was recorded at all, or (in a Python-frames-only tree, analysis.tree) the stack holds
# C++ frames only - autograd's backward threads, C++ code.
NO_STACK_LABEL = "<no stack recorded>"
NO_PYTHON_LABEL = "<no Python frames: C++ / backward>"


def user_frame_of_stacks(snap: Snapshot, hide_patterns: Sequence[str] | None = None) -> np.ndarray:
    """Per stack id, its first user frame id (-1 if none), cached on the snapshot object."""
    key = tuple(hide_patterns) if hide_patterns is not None else None
    return memo(snap, ("user_frames", key), lambda: first_user_frames(snap, hide_patterns))


def frame_label(snap: Snapshot, frame_id: int) -> str:
    if frame_id < 0:
        return NO_STACK_LABEL
    f = snap.frames
    name = snap.strings[f.name[frame_id]]
    filename = snap.strings[f.filename[frame_id]]
    if f.kind[frame_id] != PYTHON:
        name = short_cpp_name(name)
        return name if filename in ("", "??") else f"{name} ({filename})"
    return f"{name} ({filename}:{int(f.line[frame_id])})"


def frame_dict(snap: Snapshot, frame_id: int) -> Frame:
    if frame_id < 0:
        return {"filename": None, "line": None, "name": None}
    f = snap.frames
    return {
        "filename": snap.strings[f.filename[frame_id]],
        "line": int(f.line[frame_id]),
        "name": snap.strings[f.name[frame_id]],
    }


def site_of_allocations(
    dev: DeviceTrace, rows: np.ndarray, hide_patterns: Sequence[str] | None = None
) -> np.ndarray:
    """First user frame id of each allocation row (-1 where no stack)."""
    ufs = user_frame_of_stacks(dev.snapshot, hide_patterns)
    stacks = dev.alloc_stack[rows]
    out = np.full(len(rows), -1, dtype=np.int32)
    has = stacks >= 0
    out[has] = ufs[stacks[has]]
    return out


def top_sites(
    dev: DeviceTrace,
    rows: np.ndarray,
    *,
    limit: int | None = 10,
    hide_patterns: Sequence[str] | None = None,
) -> list[Site]:
    """Allocations `rows` grouped by first user frame, largest total first."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return []
    site = site_of_allocations(dev, rows, hide_patterns)
    sizes = dev.alloc_size[rows]
    uniq, inv = np.unique(site, return_inverse=True)
    total = np.bincount(inv, weights=sizes, minlength=len(uniq))
    # weights go through float64: exact below 2**53 bytes (8 PiB), far above any GPU
    count = np.bincount(inv, minlength=len(uniq))
    order = np.lexsort((uniq, -total))
    if limit is not None:
        order = order[:limit]
    snap = dev.snapshot
    return [_site_row(snap, int(uniq[k]), int(total[k]), int(count[k])) for k in order]


def _site_row(snap: Snapshot, site: int, nbytes: int, count: int) -> Site:
    """One Site object of the JSON (docs/json-schema.md): the site's name, its frame's
    filename/line/name, bytes and count."""
    return {"site": frame_label(snap, site), **frame_dict(snap, site), "bytes": nbytes,
            "count": count}  # fmt: skip


def net_sites(
    dev: DeviceTrace,
    plus_rows: np.ndarray,
    minus_rows: np.ndarray,
    *,
    limit: int | None = 10,
    hide_patterns: Sequence[str] | None = None,
    positive_only: bool = True,
) -> list[NetSite]:
    """Net bytes per first user frame: sizes of `plus_rows` minus sizes of `minus_rows`
    (e.g. allocated inside a window and still alive, minus freed there but made before).
    Largest net first; with positive_only, sites that did not grow are left out.
    Each row: top_sites fields with "bytes" = net, plus "added_bytes", "removed_bytes"."""
    plus_rows = np.asarray(plus_rows, dtype=np.int64)
    minus_rows = np.asarray(minus_rows, dtype=np.int64)
    if len(plus_rows) + len(minus_rows) == 0:
        return []
    rows = np.concatenate([plus_rows, minus_rows])
    site = site_of_allocations(dev, rows, hide_patterns)
    size = dev.alloc_size[rows].astype(np.float64)
    sign = np.concatenate([np.ones(len(plus_rows)), -np.ones(len(minus_rows))])
    uniq, inv = np.unique(site, return_inverse=True)
    added = np.bincount(inv, weights=size * (sign > 0), minlength=len(uniq)).astype(np.int64)
    removed = np.bincount(inv, weights=size * (sign < 0), minlength=len(uniq)).astype(np.int64)
    count = np.bincount(inv[: len(plus_rows)], minlength=len(uniq))
    net = added - removed
    order = np.lexsort((uniq, -net))
    if positive_only:
        order = order[net[order] > 0]
    if limit is not None:
        order = order[:limit]
    snap = dev.snapshot
    return [
        {**_site_row(snap, int(uniq[k]), int(net[k]), int(count[k])),
         "added_bytes": int(added[k]), "removed_bytes": int(removed[k])}
        for k in order
    ]  # fmt: skip

"""Replay a device's trace into allocation lifetimes and memory curves, in columns.

Semantics (docs/concepts.md has the long form; they match PyTorch's MemoryViz
`process_alloc_data`, so the active curve equals its "Active Memory Timeline" total):

* an allocation lives from its `alloc` to its `free_completed`; between `free_requested`
  and `free_completed` it still holds memory;
* a free whose address has no open allocation is an allocation made before recording
  began, alive from the start, with the free's size and stack;
* an `active_allocated` block of the final segments with no open allocation at the end
  was alive for the whole window ("ghost");
* an `alloc` at an address that is already open leaves the earlier allocation alive to
  the end (MemoryViz does the same; the trace must have lost a free) — flagged OVERWRITTEN;
* if a trace has `free_requested` but no `free_completed` at all (skip_actions), the
  requests are taken as the frees.

Two implementations give the same columns, to the byte (tests/snapshot/test_fastreplay.py):
the compiled one (csrc/replay.c) pairs events with a hash map from address to its last
alloc/free and builds rows and curves in that one pass over the events; the numpy one, used
when it is not built or MEMLENS_READER=python, pairs them without a Python loop: the
alloc/free events are stably sorted by address, so each free's partner is simply its
predecessor in the sorted order, and each column is then one array pass.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from memlens.snapshot.actions import Action
from memlens.snapshot.model import (
    GHOST,
    LIVE_AT_END,
    OVERWRITTEN,
    PENDING_FREE,
    PREEXISTING,
    DeviceTrace,
    Segments,
    Snapshot,
)
from memlens.snapshot.native import native_replay


def _last_true_index(mask: np.ndarray) -> np.ndarray:
    """For each position, the index of the last True at or before it (-1 if none)."""
    idx = np.where(mask, np.arange(len(mask)), -1)
    return np.maximum.accumulate(idx) if len(idx) else idx


def _next_true_index(mask: np.ndarray) -> np.ndarray:
    """For each position, the index of the first True at or after it (len if none)."""
    n = len(mask)
    idx = np.where(mask, np.arange(n), n)
    return np.minimum.accumulate(idx[::-1])[::-1] if n else idx


def _pair_numpy(
    action: np.ndarray,
    addr: np.ndarray,
    is_alloc: np.ndarray,
    is_free: np.ndarray,
    is_request: np.ndarray,
) -> dict[str, Any]:
    """Allocation rows from alloc/free/request events (the compiled replay does the same
    in its one pass): per event its row and version, per row its events, version, the
    event its address/size/stack come from, and flags; `orphans` rows come first."""
    n = len(action)
    # --- pair allocs and frees: sort (alloc|free|request) events by address, stably ----
    idx = np.flatnonzero(is_alloc | is_free | is_request)
    order = np.argsort(addr[idx], kind="stable")
    sidx = idx[order]  # event indices, grouped by address, in trace order within a group
    saddr = addr[sidx]
    s_alloc = is_alloc[sidx]
    s_free = is_free[sidx]
    m = len(sidx)
    group_start = np.ones(m, dtype=bool)
    if m:
        group_start[1:] = saddr[1:] != saddr[:-1]
    group_id = np.cumsum(group_start) - 1

    anchor = s_alloc | s_free  # requests do not open or close anything
    prev_anchor = np.full(m, -1, dtype=np.int64)
    if m:
        prev_anchor[1:] = _last_true_index(anchor)[:-1]
    prev_ok = (prev_anchor >= 0) & (group_id[np.maximum(prev_anchor, 0)] == group_id)
    matched_free = s_free & prev_ok & s_alloc[np.maximum(prev_anchor, 0)]
    orphan_free = s_free & ~matched_free
    next_anchor = np.full(m, m, dtype=np.int64)
    if m:
        next_anchor[:-1] = _next_true_index(anchor)[1:]
    next_ok = (next_anchor < m) & (group_id[np.minimum(next_anchor, m - 1)] == group_id)
    overwritten = s_alloc & next_ok & s_alloc[np.minimum(next_anchor, m - 1)]

    # --- allocation rows: pre-existing (orphan frees) first, then allocs in trace order ---
    orphan_pos = np.flatnonzero(orphan_free)
    alloc_pos = np.flatnonzero(s_alloc)
    alloc_pos = alloc_pos[np.argsort(sidx[alloc_pos], kind="stable")]
    orphan_pos = orphan_pos[np.argsort(sidx[orphan_pos], kind="stable")]
    n_orphan, n_alloc = len(orphan_pos), len(alloc_pos)
    row_of_pos = np.full(m, -1, dtype=np.int64)
    row_of_pos[orphan_pos] = np.arange(n_orphan)
    row_of_pos[alloc_pos] = n_orphan + np.arange(n_alloc)
    # a matched free belongs to its alloc's row; a request to the row of the alloc before it,
    # or (orphans) of the free after it
    mf = np.flatnonzero(matched_free)
    row_of_pos[mf] = row_of_pos[prev_anchor[mf]]
    req = np.flatnonzero(~anchor)
    if len(req):
        pa = prev_anchor[req]
        before = (pa >= 0) & prev_ok[req] & s_alloc[np.maximum(pa, 0)]
        # the open allocation is the previous alloc only if no free came in between
        row_of_pos[req[before]] = row_of_pos[pa[before]]
        na = next_anchor[req]
        after = ~before & next_ok[req] & orphan_free[np.minimum(na, m - 1)]
        row_of_pos[req[after]] = row_of_pos[na[after]]

    # version: number of frees at this address before the allocation began
    free_cum = np.cumsum(s_free) - s_free  # frees strictly before, global
    group_first = np.flatnonzero(group_start)
    free_before_group = free_cum[group_first][group_id] if m else free_cum
    frees_before = free_cum - free_before_group
    # an orphan's own free is its version boundary: count frees before it; allocs likewise
    n_rows_trace = n_orphan + n_alloc
    row_alloc_event = np.full(n_rows_trace, -1, dtype=np.int64)
    row_alloc_event[n_orphan:] = sidx[alloc_pos]
    row_free_event = np.full(n_rows_trace, n, dtype=np.int64)
    row_free_event[:n_orphan] = sidx[orphan_pos]
    row_free_event[row_of_pos[mf]] = sidx[mf]
    row_req_event = np.full(n_rows_trace, -1, dtype=np.int64)
    if len(req):
        r = row_of_pos[req]
        ok = r >= 0
        # the first request wins (stable order), so write in reverse
        rr, ev_req = r[ok][::-1], sidx[req[ok]][::-1]
        row_req_event[rr] = ev_req
    row_version = np.zeros(n_rows_trace, dtype=np.int32)
    row_version[:n_orphan] = frees_before[orphan_pos]
    row_version[n_orphan:] = frees_before[alloc_pos]
    src_pos = np.concatenate([orphan_pos, alloc_pos])
    src_event = sidx[src_pos]
    row_flags = np.zeros(n_rows_trace, dtype=np.uint8)
    row_flags[:n_orphan] |= PREEXISTING
    row_flags[n_orphan:][overwritten[alloc_pos]] |= OVERWRITTEN

    # per-event version and row
    version = np.full(n, -1, dtype=np.int32)
    alloc_row = np.full(n, -1, dtype=np.int32)
    has_row = row_of_pos >= 0
    alloc_row[sidx[has_row]] = row_of_pos[has_row]
    version[sidx[has_row]] = row_version[row_of_pos[has_row]]
    return {
        "row": alloc_row,
        "event_version": version,
        "alloc_event": row_alloc_event,
        "free_event": row_free_event,
        "req_event": row_req_event,
        "version": row_version,
        "src_event": src_event,
        "flags": row_flags,
        "orphans": n_orphan,
    }


class _Candidates(NamedTuple):
    """The final state's active_allocated blocks of one device: the ghosts are those with
    no allocation alive at the end at their address."""

    addr: np.ndarray  # uint64
    size: np.ndarray  # int64, requested bytes
    stack: np.ndarray  # int32
    stream: np.ndarray  # int32, the segment's


def _ghost_candidates(seg: Segments, seg_rows: np.ndarray) -> _Candidates:
    """The active_allocated blocks of the segments `seg_rows`, in block order."""
    if len(seg_rows):
        blk = np.concatenate(
            [np.arange(seg.block_offsets[s], seg.block_offsets[s + 1]) for s in seg_rows]
        ).astype(np.int64)
        blk = blk[seg.block_state[blk] == 1]
    else:
        blk = np.zeros(0, dtype=np.int64)
    seg_of_blk = np.searchsorted(seg.block_offsets, blk, side="right") - 1
    return _Candidates(
        addr=np.ascontiguousarray(seg.block_address[blk], dtype=np.uint64),
        size=np.ascontiguousarray(seg.block_requested_size[blk], dtype=np.int64),
        stack=np.ascontiguousarray(seg.block_stack[blk], dtype=np.int32),
        stream=np.ascontiguousarray(seg.stream[seg_of_blk], dtype=np.int32),
    )


_SEGMENT_GROW = bytes([Action.SEGMENT_ALLOC, Action.SEGMENT_MAP])
_SEGMENT_SHRINK = bytes([Action.SEGMENT_FREE, Action.SEGMENT_UNMAP])

# the compiled replay's buffers, by DeviceTrace field
_COMPILED_DTYPES = {
    "alloc_row": np.int32,
    "version": np.int32,
    "active_after": np.int64,
    "reserved_after": np.int64,
    "alloc_event": np.int64,
    "free_event": np.int64,
    "free_requested_event": np.int64,
    "alloc_version": np.int32,
    "alloc_addr": np.uint64,
    "alloc_size": np.int64,
    "alloc_stack": np.int32,
    "alloc_stream": np.int32,
    "alloc_flags": np.uint8,
}


def _replay_compiled(
    fast: ModuleType, ev: dict[str, np.ndarray], ghosts: _Candidates, end_reserved: int | None
) -> dict[str, Any]:
    """The whole replay in one pass over the events (csrc/replay.c); same result as
    _replay_numpy, to the byte."""
    out = fast.replay(
        action=np.ascontiguousarray(ev["action"], dtype=np.uint8),
        addr=np.ascontiguousarray(ev["addr"], dtype=np.uint64),
        size=np.ascontiguousarray(ev["size"], dtype=np.int64),
        stack=np.ascontiguousarray(ev["stack"], dtype=np.int32),
        stream=np.ascontiguousarray(ev["stream"], dtype=np.int32),
        ghost_addr=ghosts.addr,
        ghost_size=ghosts.size,
        ghost_stack=ghosts.stack,
        ghost_stream=ghosts.stream,
        alloc_code=int(Action.ALLOC),
        free_code=int(Action.FREE_COMPLETED),
        request_code=int(Action.FREE_REQUESTED),
        grow_codes=_SEGMENT_GROW,
        shrink_codes=_SEGMENT_SHRINK,
        requests_as_frees=True,  # no free_completed at all: the requests are the frees
        end_reserved=end_reserved,
    )
    cols: dict[str, Any] = {
        name: np.frombuffer(out.pop(name), dtype=dtype) for name, dtype in _COMPILED_DTYPES.items()
    }
    for name in ("baseline_bytes", "reserved_start_bytes", "overwritten", "frees_from_requested"):
        cols[name] = out[name]
    return cols


def _replay_numpy(
    ev: dict[str, np.ndarray], ghosts: _Candidates, end_reserved: int | None
) -> dict[str, Any]:
    """The replay with numpy array passes (no compiled replay, or MEMLENS_READER=python)."""
    action, addr, size = ev["action"], ev["addr"], ev["size"]
    n = len(action)
    is_alloc = action == Action.ALLOC
    has_completed = bool(np.any(action == Action.FREE_COMPLETED))
    frees_from_requested = not has_completed and bool(np.any(action == Action.FREE_REQUESTED))
    free_code = Action.FREE_REQUESTED if frees_from_requested else Action.FREE_COMPLETED
    is_free = action == free_code
    is_request = (action == Action.FREE_REQUESTED) & ~is_free
    pairing = _pair_numpy(action, addr, is_alloc, is_free, is_request)
    del is_alloc, is_free, is_request
    alloc_row = pairing["row"]
    src_event = pairing["src_event"]
    rows = {
        "alloc_event": pairing["alloc_event"],
        "free_event": pairing["free_event"],
        "free_requested_event": pairing["req_event"],
        "alloc_version": pairing["version"],
        "alloc_addr": addr[src_event].astype(np.uint64, copy=False),
        "alloc_size": size[src_event].astype(np.int64, copy=False),
        "alloc_stack": ev["stack"][src_event].astype(np.int32, copy=False),
        "alloc_stream": ev["stream"][src_event].astype(np.int32, copy=False),
        "alloc_flags": pairing["flags"],
    }

    # --- ghosts: active_allocated blocks of the final state with no open allocation -------
    live_end = rows["free_event"] == n
    is_ghost = ~np.isin(ghosts.addr, np.unique(rows["alloc_addr"][live_end]))
    n_ghost = int(np.count_nonzero(is_ghost))
    if n_ghost:
        ghost_addr = ghosts.addr[is_ghost]
        # a ghost's version: how many allocations at its address ended inside the trace
        ended = rows["alloc_addr"][~live_end]
        keys = np.unique(ghost_addr)  # few: keep only the ended allocations at those first
        pos = np.minimum(np.searchsorted(keys, ended), len(keys) - 1)
        ended = np.sort(ended[keys[pos] == ended])
        ghost_version = np.searchsorted(ended, ghost_addr, side="right") - np.searchsorted(
            ended, ghost_addr, side="left"
        )
        front = {
            "alloc_event": np.full(n_ghost, -1, np.int64),
            "free_event": np.full(n_ghost, n, np.int64),
            "free_requested_event": np.full(n_ghost, -1, np.int64),
            "alloc_version": ghost_version.astype(np.int32),
            "alloc_addr": ghost_addr,
            "alloc_size": ghosts.size[is_ghost],
            "alloc_stack": ghosts.stack[is_ghost],
            "alloc_stream": ghosts.stream[is_ghost],
            "alloc_flags": np.full(n_ghost, PREEXISTING | GHOST, np.uint8),
        }
        rows = {k: np.concatenate([front[k], v]) for k, v in rows.items()}
        alloc_row[alloc_row >= 0] += n_ghost
        live_end = rows["free_event"] == n
    flags = rows["alloc_flags"]
    flags[live_end] |= LIVE_AT_END
    flags[live_end & (rows["free_requested_event"] >= 0)] |= PENDING_FREE

    # --- active curve ----------------------------------------------------------------------
    # each alloc and each free event belongs to one row at most, so plain indexed adds are
    # exact (and much faster than np.add.at); cumsum and the baseline in place: a fresh
    # 8-byte-per-event array costs page faults
    row_size = rows["alloc_size"]
    delta = np.zeros(n + 1, dtype=np.int64)
    started = rows["alloc_event"] >= 0
    delta[rows["alloc_event"][started]] += row_size[started]
    freed = rows["free_event"] < n
    delta[rows["free_event"][freed]] -= row_size[freed]
    baseline = int(row_size[~started].sum())
    active_after = np.cumsum(delta[:n], out=delta[:n])
    if baseline:
        active_after += baseline

    # --- reserved curve, anchored on the final segments so truncation does not matter ----
    # segment events are few: set their signed sizes, then one cumsum
    reserved_after = np.zeros(n, dtype=np.int64)
    grow = np.flatnonzero((action == Action.SEGMENT_ALLOC) | (action == Action.SEGMENT_MAP))
    shrink = np.flatnonzero((action == Action.SEGMENT_FREE) | (action == Action.SEGMENT_UNMAP))
    reserved_after[grow] = size[grow]
    reserved_after[shrink] = -size[shrink]
    np.cumsum(reserved_after, out=reserved_after)
    total_change = int(reserved_after[-1]) if n else 0
    if end_reserved is not None:
        reserved_start = end_reserved - total_change
    else:
        # No final state to anchor on: start as low as the events allow without going negative.
        reserved_start = max(0, -int(reserved_after.min())) if n else 0
    if reserved_start:
        reserved_after += reserved_start

    return {
        "version": pairing["event_version"],
        "alloc_row": alloc_row,
        **rows,
        "active_after": active_after,
        "reserved_after": reserved_after,
        "baseline_bytes": baseline,
        "reserved_start_bytes": int(reserved_start),
        "overwritten": int(np.count_nonzero(flags & OVERWRITTEN)),
        "frees_from_requested": frees_from_requested,
    }


def replay_device(
    snap: Snapshot, device: int, ev: dict[str, np.ndarray], warn: Callable[[str, str], None]
) -> DeviceTrace:
    seg = snap.segments
    seg_rows = seg.of_device(device)
    ghosts = _ghost_candidates(seg, seg_rows)
    end_reserved = int(seg.total_size[seg_rows].sum()) if len(seg_rows) else None
    fast = native_replay()
    if fast is not None:
        cols = _replay_compiled(fast, ev, ghosts, end_reserved)
    else:
        cols = _replay_numpy(ev, ghosts, end_reserved)

    n_over = cols.pop("overwritten")
    if n_over:
        warn(
            f"overwritten:{device}",
            f"device {device}: {n_over} allocations were made at an address still in use "
            "(a free is missing from the trace); the earlier ones are kept alive to the end, "
            "as PyTorch's viewer does",
        )
    if cols["frees_from_requested"]:
        warn(
            f"requested-only:{device}",
            f"device {device}: no free_completed in the trace; free_requested taken as the free",
        )

    return DeviceTrace(
        device=device,
        snapshot=snap,
        action=ev["action"],
        addr=ev["addr"],
        size=ev["size"],
        stream=ev["stream"],
        time_us=ev["time_us"],
        stack=ev["stack"],
        pool=ev["pool"],
        compile_context=ev["compile_context"],
        user_metadata=ev["user_metadata"],
        forward_stack=ev["forward_stack"],
        **cols,
    )

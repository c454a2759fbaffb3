"""Trace-entry actions as small integer codes (one byte per event in the columns)."""

from __future__ import annotations

from enum import IntEnum


class Action(IntEnum):
    ALLOC = 0
    FREE_REQUESTED = 1
    FREE_COMPLETED = 2
    SEGMENT_ALLOC = 3
    SEGMENT_FREE = 4
    SEGMENT_MAP = 5
    SEGMENT_UNMAP = 6
    SNAPSHOT = 7
    OOM = 8
    # Ascend NPU (torch_npu): the NPU workspace allocator's memory, recorded in the same
    # trace; it is outside the caching allocator, so the replay leaves it out (as SNAPSHOT)
    WORKSPACE_SNAPSHOT = 9
    # Codes from FIRST_UNKNOWN on are actions this version does not know; their names are
    # kept per snapshot in Snapshot.action_names so nothing is lost.
    FIRST_UNKNOWN = 16


KNOWN_ACTIONS: dict[str, int] = {
    "alloc": Action.ALLOC,
    "free_requested": Action.FREE_REQUESTED,
    "free_completed": Action.FREE_COMPLETED,
    "segment_alloc": Action.SEGMENT_ALLOC,
    "segment_free": Action.SEGMENT_FREE,
    "segment_map": Action.SEGMENT_MAP,
    "segment_unmap": Action.SEGMENT_UNMAP,
    "snapshot": Action.SNAPSHOT,
    "oom": Action.OOM,
    "workspace_snapshot": Action.WORKSPACE_SNAPSHOT,
}

BLOCK_STATES: dict[str, int] = {
    "inactive": 0,
    "active_allocated": 1,
    "active_pending_free": 2,
    # PyTorch's docstring names this state, but the C++ emits active_pending_free.
    "active_awaiting_free": 2,
}
BLOCK_STATE_NAMES = ["inactive", "active_allocated", "active_pending_free"]

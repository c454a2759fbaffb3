"""Regular expressions over frames, evaluated once per distinct string and reduced per
stack with numpy (a million events share a few thousand stacks and frames).

A frame's text is "filename:line:name", as PyTorch's viewer prints it.
"""

from __future__ import annotations

import re

import numpy as np

from memlens.analysis.events import memo
from memlens.snapshot.model import Snapshot


def frame_texts(snap: Snapshot) -> list[str]:
    def make() -> list[str]:
        f, s = snap.frames, snap.strings
        return [
            f"{s[a]}:{int(b)}:{s[c]}"
            for a, b, c in zip(f.filename.tolist(), f.line.tolist(), f.name.tolist())
        ]

    return memo(snap, "frame_texts", make)


def frame_mask(snap: Snapshot, pattern: str | re.Pattern[str]) -> np.ndarray:
    """Per frame id: does `pattern` search-match its "filename:line:name" text?"""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return np.fromiter(
        (rx.search(t) is not None for t in frame_texts(snap)), dtype=bool, count=len(snap.frames)
    )


def stack_any(snap: Snapshot, fmask: np.ndarray) -> np.ndarray:
    """Per stack id: does any of its frames have fmask True?"""
    st = snap.stacks
    if len(st) == 0:
        return np.zeros(0, dtype=bool)
    hit = fmask[st.frame_ids].astype(np.int64)
    cum = np.concatenate([[0], np.cumsum(hit)])
    hit_any: np.ndarray = (cum[st.offsets[1:]] - cum[st.offsets[:-1]]) > 0
    return hit_any


def stack_matches(snap: Snapshot, pattern: str | re.Pattern[str]) -> np.ndarray:
    return stack_any(snap, frame_mask(snap, pattern))


def rows_matching(stack_flags: np.ndarray, stacks: np.ndarray) -> np.ndarray:
    """Per allocation (its stack id; -1 = none): the stack's flag, False without a stack."""
    out = np.zeros(len(stacks), dtype=bool)
    has = stacks >= 0
    if len(stack_flags):
        out[has] = stack_flags[stacks[has]]
    return out

"""Call-stack trees: bytes aggregated at every level, root (outermost frame) first.

Built from distinct stacks, never from individual allocations: sizes are first summed per
stack id with numpy, then each distinct stack is walked once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from memlens.analysis.cells import cell_name
from memlens.analysis.events import memo
from memlens.analysis.paths import short_filenames
from memlens.analysis.results import TreeFrame, TreeNode
from memlens.analysis.sites import (
    NO_PYTHON_LABEL,
    NO_STACK_LABEL,
    SITE_HIDE_PATTERNS,
    frame_label,
    python_frame_text,
    user_frame_of_stacks,
)
from memlens.snapshot.frames import NOISE, PYTHON, hidden_filename_mask, short_cpp_name
from memlens.snapshot.model import DeviceTrace, Snapshot

ROOT_LABEL = "all"
NO_STACK_ID = -1  # frame id of the "<no stack recorded>" node (and of the root)
NO_PYTHON_ID = -3  # frame id of the "<no Python frames: C++ / backward>" node
# frame kind code (snapshot.frames PYTHON, CPP, NOISE) -> its JSON name
_KIND_NAMES: tuple[Literal["python"], Literal["cpp"], Literal["noise"]] = ("python", "cpp", "noise")


@dataclass
class StackNode:
    frame_id: int  # -1 for the root and for "<no stack>"
    label: str
    bytes: int = 0
    count: int = 0
    children: dict[int, StackNode] = field(default_factory=dict)

    def sorted_children(self) -> list[StackNode]:
        return sorted(self.children.values(), key=lambda c: (-c.bytes, c.label))

    def to_dict(self, snap: Snapshot | None = None, max_depth: int | None = None) -> TreeNode:
        """The JSON TreeNode; below `max_depth` levels "children" is [] (None: all)."""
        kids: list[TreeNode] = []
        if max_depth is None or max_depth > 0:
            nd = None if max_depth is None else max_depth - 1
            kids = [c.to_dict(snap, nd) for c in self.sorted_children()]
        if snap is None or self.frame_id < 0:
            return {"label": self.label, "bytes": self.bytes, "count": self.count, "children": kids}
        f = snap.frames
        frame: TreeFrame = {
            "filename": snap.strings[f.filename[self.frame_id]],
            "line": int(f.line[self.frame_id]),
            "name": snap.strings[f.name[self.frame_id]],
            "kind": _KIND_NAMES[int(f.kind[self.frame_id])],
        }
        # key order as in the JSON: frame before children
        return {
            "label": self.label,
            "bytes": self.bytes,
            "count": self.count,
            "frame": frame,
            "children": kids,
        }


def frame_short_label(snap: Snapshot, frame_id: int) -> str:
    """`name (file.py:line)`, the file with as many parent folders as make it unique in
    the snapshot (analysis.paths: torch's `optim/optimizer.py` vs `mylib/optimizer.py`)."""
    f = snap.frames
    base = short_filenames(snap)[int(f.filename[frame_id])]
    name = snap.strings[f.name[frame_id]]
    if f.kind[frame_id] != PYTHON:
        name = short_cpp_name(name)
        return name if base in ("", "??") else f"{name} ({base})"
    filename = snap.strings[f.filename[frame_id]]
    if cell_name(filename):  # a notebook cell: the same words as the long label
        return python_frame_text(name, filename, int(f.line[frame_id]))
    return f"{name} ({base}:{int(f.line[frame_id])})"


def internal_frame_mask(snap: Snapshot, hide_patterns: Sequence[str] | None = None) -> np.ndarray:
    """Per frame: is it plumbing that trees hide by default? THE definition every tree uses
    (`memlens peak` and `at`, the report's icicle, the viewer's tree, the TUI's user-frames
    view): a Python frame whose file the site patterns hide (None: SITE_HIDE_PATTERNS:
    torch's own code, so nn.Module's `_wrapped_call_impl`/`_call_impl` and the optimizer's
    `wrapper`, the standard library, thin glue; --hide adds to them), exactly the frames
    the call-site rule (analysis.sites) looks past. C++ frames are not internal here:
    Python-only trees drop them anyway, and the all-frames views show everything."""
    patterns = SITE_HIDE_PATTERNS if hide_patterns is None else tuple(hide_patterns)

    def make() -> np.ndarray:
        f = snap.frames
        hidden = hidden_filename_mask(snap.strings, f.filename, patterns)
        mask: np.ndarray = (np.asarray(f.kind) == PYTHON) & hidden
        return mask

    return memo(snap, ("internal_frames", patterns), make)


def build_stack_tree(
    snap: Snapshot,
    stack_ids: np.ndarray,
    sizes: np.ndarray,
    *,
    python_only: bool = False,
    hide_noise: bool = True,
    group_no_python: bool | None = None,
    hide_internal: bool = False,
    hide_patterns: Sequence[str] | None = None,
) -> StackNode:
    """Tree of the given allocations (their stack ids and sizes), outermost frame at the top.

    python_only drops C++ frames (most users want the Python view first); hide_noise drops
    the unwinder/interpreter frames PyTorch's viewer hides too.

    The labelling rule every view shares (CLI, report, viewer, TUI): with python_only, an
    allocation whose recorded stack holds no Python frame at all (autograd's backward
    threads, C++ code) goes under one NO_PYTHON_LABEL node with a child per site, named by
    analysis.sites (the autograd node, e.g. `torch::autograd::AccumulateGrad::apply`);
    only an allocation without a recorded stack is NO_STACK_LABEL. group_no_python (default:
    python_only) applies that grouping without dropping C++ frames elsewhere (the TUI's
    "user frames" view, which keeps autograd nodes).

    hide_internal drops the frames internal_frame_mask(hide_patterns) names; a stack whose
    every shown frame is internal ends in a leaf named by its call site (analysis.sites,
    with the same patterns), so its bytes stay visible under the name every table uses.
    """
    stack_ids = np.asarray(stack_ids)
    sizes = np.asarray(sizes, dtype=np.int64)
    root = StackNode(-1, ROOT_LABEL)
    if len(stack_ids) == 0:
        return root
    shifted = stack_ids.astype(np.int64) + 1  # -1 (no stack) -> bucket 0
    uniq, inv = np.unique(shifted, return_inverse=True)
    per_bytes = np.zeros(len(uniq), dtype=np.int64)
    np.add.at(per_bytes, inv, sizes)
    per_count = np.bincount(inv, minlength=len(uniq))
    kind = snap.frames.kind
    label_cache: dict[int, str] = {}
    no_python = StackNode(NO_PYTHON_ID, NO_PYTHON_LABEL)
    group = python_only if group_no_python is None else group_no_python
    has_python = stack_has_python(snap) if group else None
    internal = internal_frame_mask(snap, hide_patterns) if hide_internal else None
    for k, s1 in enumerate(uniq.tolist()):
        b, c = int(per_bytes[k]), int(per_count[k])
        root.bytes += b
        root.count += c
        if has_python is not None and s1 > 0 and not has_python[s1 - 1]:
            _add_to_group(snap, no_python, s1 - 1, b, c)
            continue
        node = root
        frames = snap.stacks.frames_of(s1 - 1)[::-1]  # outermost first
        for fid in frames.tolist():
            kd = kind[fid]
            if (hide_noise and kd == NOISE) or (python_only and kd != PYTHON):
                continue
            if internal is not None and internal[fid]:
                continue
            child = node.children.get(fid)
            if child is None:
                lab = label_cache.get(fid)
                if lab is None:
                    lab = label_cache[fid] = frame_short_label(snap, fid)
                child = node.children[fid] = StackNode(fid, lab)
            child.bytes += b
            child.count += c
            node = child
        if node is root:  # no frames survived: keep the bytes visible under a named leaf
            site = NO_STACK_ID
            if internal is not None and s1 > 0:  # its frames were all internal
                site = int(user_frame_of_stacks(snap, hide_patterns)[s1 - 1])
            child = node.children.get(site)
            if child is None:
                lab = NO_STACK_LABEL if site < 0 else frame_short_label(snap, site)
                child = node.children[site] = StackNode(site, lab)
            child.bytes += b
            child.count += c
    if no_python.count:
        root.children[NO_PYTHON_ID] = no_python
    return root


def _add_to_group(snap: Snapshot, group: StackNode, stack_id: int, b: int, c: int) -> None:
    """Count a stack without Python frames in the group, under its site's child."""
    site = int(user_frame_of_stacks(snap)[stack_id])
    child = group.children.get(site)
    if child is None:
        child = group.children[site] = StackNode(site, frame_label(snap, site))
    child.bytes += b
    child.count += c
    group.bytes += b
    group.count += c


def stack_has_python(snap: Snapshot) -> np.ndarray:
    """Per stack id: does it hold at least one Python frame? (cached on the snapshot)"""

    def make() -> np.ndarray:
        st = snap.stacks
        if len(st) == 0:
            return np.zeros(0, bool)
        is_py = (snap.frames.kind[st.frame_ids] == PYTHON).astype(np.int64)
        cum = np.concatenate([[0], np.cumsum(is_py)])
        has: np.ndarray = (cum[st.offsets[1:]] - cum[st.offsets[:-1]]) > 0
        return has

    return memo(snap, "has_python", make)


def live_tree(dev: DeviceTrace, event: int, **kw: Any) -> StackNode:
    """The tree of what is live right after `event`."""
    rows = dev.live_at(event)
    return build_stack_tree(dev.snapshot, dev.alloc_stack[rows], dev.alloc_size[rows], **kw)

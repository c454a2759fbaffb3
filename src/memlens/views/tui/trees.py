"""Trees the detail views show: live allocations by call stack, and the diff of two of them.

Built on memlens.analysis.tree.build_stack_tree (bytes summed per distinct stack, then each
stack walked once). Hiding frames is a transform of that tree: a hidden frame's children
are lifted into its parent and merged with their new siblings, so totals never change.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from memlens.analysis.events import memo
from memlens.analysis.matching import site_key
from memlens.analysis.sites import NO_STACK_LABEL, site_of_allocations
from memlens.analysis.tree import (
    NO_PYTHON_ID,
    ROOT_LABEL,
    StackNode,
    build_stack_tree,
    frame_short_label,
    internal_frame_mask,
    stack_has_python,
)
from memlens.snapshot.frames import NOISE, PYTHON, autograd_node_mask
from memlens.snapshot.model import DeviceTrace, Snapshot

HIDDEN_LEAF = -2  # frame id of "<inside hidden frames>" leaves
HIDDEN_LABEL = "<inside hidden frames>"


@dataclass(eq=False)
class Node:
    """A row of a detail tree. `value` is bytes (or the change in bytes in a diff)."""

    label: str
    value: int = 0
    count: int = 0
    frame_id: int = -1  # -1 root / no stack, HIDDEN_LEAF, else a frame id of the snapshot
    children: list[Node] = field(default_factory=list)
    parent: Node | None = field(default=None, repr=False)
    before: int = 0  # diff only: bytes in the first snapshot (value = after - before)
    after: int = 0
    row: int = -1  # allocation row, for allocation lists
    dev: DeviceTrace | None = field(default=None, repr=False)  # whose row (allocation lists)

    def ancestry(self) -> list[Node]:
        """The nodes from the root's child down to this one."""
        out: list[Node] = []
        n: Node | None = self
        while n is not None and n.parent is not None:
            out.append(n)
            n = n.parent
        return out[::-1]

    def path(self) -> list[int]:
        """Frame ids from the root's child down to this node."""
        return [n.frame_id for n in self.ancestry()]

    def walk(self) -> Iterator[Node]:
        """This node and every descendant, depth first, children in display order."""
        stack = [self]
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children))


class _Builder:
    __slots__ = ("label", "frame_id", "bytes", "count", "kids")

    def __init__(self, frame_id: int, label: str) -> None:
        self.frame_id, self.label = frame_id, label
        self.bytes = self.count = 0
        self.kids: dict[int, _Builder] = {}

    def child(self, frame_id: int, label: str) -> _Builder:
        c = self.kids.get(frame_id)
        if c is None:
            c = self.kids[frame_id] = _Builder(frame_id, label)
        return c


def _keep_all(frame_id: int) -> bool:
    return True


def _absorb(target: _Builder, children: dict[int, StackNode], keep: Callable[[int], bool]) -> None:
    for c in children.values():
        if c.frame_id < 0 or keep(c.frame_id):
            t = target.child(c.frame_id, c.label)
            t.bytes += c.bytes
            t.count += c.count
            # the C++-only group's children are sites, named by the one site rule: kept
            _absorb(t, c.children, _keep_all if c.frame_id == NO_PYTHON_ID else keep)
        else:
            _absorb(target, c.children, keep)
            own_b = c.bytes - sum(x.bytes for x in c.children.values())
            own_c = c.count - sum(x.count for x in c.children.values())
            if own_b or own_c:
                leaf = target.child(HIDDEN_LEAF, HIDDEN_LABEL)
                leaf.bytes += own_b
                leaf.count += own_c


def _freeze(b: _Builder, parent: Node | None) -> Node:
    n = Node(b.label, b.bytes, b.count, b.frame_id, parent=parent)
    kids = sorted(b.kids.values(), key=lambda k: (-k.bytes, k.label))
    n.children = [_freeze(k, n) for k in kids]
    return n


def user_frame_mask(snap: Snapshot) -> np.ndarray:
    """Per frame: shown when internals are hidden (user Python code and autograd nodes).

    Internal Python frames go, by the one definition every tree shares
    (analysis.tree.internal_frame_mask), and C++ plumbing with them; autograd nodes stay
    because backward runs on C++ threads and they name the forward op responsible.
    """

    def make() -> np.ndarray:
        kind = np.asarray(snap.frames.kind)
        user = (kind == PYTHON) & ~internal_frame_mask(snap)
        mask: np.ndarray = user | autograd_node_mask(snap)
        return mask

    return memo(snap, "tui_user_frame_mask", make)


def frame_filter(snap: Snapshot, hide_internals: bool) -> Callable[[int], bool]:
    """The predicate a frame must pass to appear in the tree (noise frames never do)."""
    kind = snap.frames.kind
    if not hide_internals:
        return lambda fid: kind[fid] != NOISE
    mask = user_frame_mask(snap)
    return lambda fid: bool(mask[fid])


def stack_tree(
    snap: Snapshot, stack_ids: np.ndarray, sizes: np.ndarray, *, hide_internals: bool
) -> Node:
    """The tree of these allocations; with hide_internals, only user frames are levels and
    stacks without Python frames go under "<no Python frames: C++ / backward>", one child
    per site, as in every other view (analysis.tree.build_stack_tree)."""
    raw = build_stack_tree(snap, stack_ids, sizes, hide_noise=True, group_no_python=hide_internals)
    root = _Builder(-1, ROOT_LABEL)
    root.bytes, root.count = raw.bytes, raw.count
    _absorb(root, raw.children, frame_filter(snap, hide_internals))
    return _freeze(root, None)


def live_stack_tree(dev: DeviceTrace, event: int, *, hide_internals: bool) -> Node:
    rows = dev.live_at(event)
    return stack_tree(
        dev.snapshot, dev.alloc_stack[rows], dev.alloc_size[rows], hide_internals=hide_internals
    )


def rows_under(
    dev: DeviceTrace, rows: np.ndarray, path: list[int], *, hide_internals: bool
) -> np.ndarray:
    """The allocation rows (of `rows`) that a tree node with this frame path accounts for.

    A stack belongs to the node if its shown frames start with the path; a trailing
    negative id (no stack / inside hidden frames) means "no shown frame after the prefix".
    With hide_internals, stacks without Python frames belong to the NO_PYTHON_ID group
    only (its children: by site).
    """
    snap = dev.snapshot
    keep = frame_filter(snap, hide_internals)
    stacks = dev.alloc_stack[rows]
    grouped = np.zeros(len(rows), dtype=bool)
    if hide_internals and len(snap.stacks):
        grouped = (stacks >= 0) & ~stack_has_python(snap)[np.maximum(stacks, 0)]
    if path and path[0] == NO_PYTHON_ID:
        if len(path) > 1:
            grouped &= site_of_allocations(dev, rows) == path[1]
        return rows[grouped]
    exact = bool(path) and path[-1] < 0
    prefix = path[:-1] if exact else path
    ok_stacks = []
    for s in np.unique(stacks[~grouped]).tolist():
        shown = [f for f in snap.stacks.frames_of(s)[::-1].tolist() if keep(f)]
        if shown[: len(prefix)] == prefix and (not exact or len(shown) == len(prefix)):
            ok_stacks.append(s)
    return rows[np.isin(stacks, ok_stacks) & ~grouped]


_LINE = re.compile(r":\d+\)$")


def diff_key(label: str) -> str:
    """What a row is matched on across two snapshots: the frame without its line number.

    Two runs of edited code rarely agree on line numbers; `f (model.py:20)` in one and
    `f (model.py:23)` in the other are the same call site for a regression check.
    """
    return _LINE.sub(")", label)


# how a tree's rows are matched: its snapshot's machine-independent frame keys, or the
# label alone (trees without a snapshot)
Keyer = Callable[[Node], str]


def node_key(snap: Snapshot | None) -> Keyer:
    """A row's diff key: with `snap`, its frame's site key (analysis.matching.site_key:
    function and path inside its package or project, so two machines' trees merge) without
    the line, as diff_key drops it; otherwise diff_key of the label."""

    def key(n: Node) -> str:
        if snap is None or not 0 <= n.frame_id < len(snap.frames):
            return diff_key(n.label)
        name, path, _ = site_key(snap, n.frame_id)
        return f"{name} ({path})" if path else name

    return key


def diff_tree(
    before: Node, after: Node, snap_a: Snapshot | None = None, snap_b: Snapshot | None = None
) -> Node:
    """Merge two trees by call path (function and file, not line); value = after - before,
    largest change first. Rows that merge several lines of one function are summed."""
    root = _diff(before, after, None, node_key(snap_a), node_key(snap_b))
    root.label = ROOT_LABEL
    return root


def _diff(a: Node | None, b: Node | None, parent: Node | None, ka: Keyer, kb: Keyer) -> Node:
    n = Node(ka(a) if a is not None else kb(b) if b is not None else "", parent=parent)
    n.before = a.value if a is not None else 0
    n.after = b.value if b is not None else 0
    n.value = n.after - n.before
    n.count = (b.count if b is not None else 0) - (a.count if a is not None else 0)
    ca = _by_key(a.children, ka) if a is not None else {}
    cb = _by_key(b.children, kb) if b is not None else {}
    labels = list(ca) + [k for k in cb if k not in ca]
    kids = [_diff(ca.get(k), cb.get(k), n, ka, kb) for k in labels]
    n.children = sorted(kids, key=lambda k: (-abs(k.value), -k.after, k.label))
    return n


def _by_key(children: list[Node], key: Keyer) -> dict[str, Node]:
    """Children by diff key; children sharing a key are merged into one (summed) node."""
    out: dict[str, Node] = {}
    for c in children:
        k = key(c)
        have = out.get(k)
        if have is None:
            out[k] = c
        else:
            out[k] = _merge(have, c, key)
    return out


def _merge(x: Node, y: Node, key: Keyer) -> Node:
    m = Node(x.label, x.value + y.value, x.count + y.count, x.frame_id)
    m.children = list(_by_key(x.children + y.children, key).values())
    return m


def matching_nodes(root: Node, keys: list[str], snap: Snapshot | None = None) -> list[Node]:
    """The nodes of a live tree (of `snap`) that a diff-tree row with this path of diff
    keys merges (several when lines of one function were summed)."""
    key = node_key(snap)
    level = [root]
    for k in keys:
        level = [c for n in level for c in n.children if key(c) == k]
    return level


def allocation_lists(parts: list[tuple[str, DeviceTrace, np.ndarray]]) -> Node:
    """One allocation list per (name, device, rows), under a common root (compare)."""
    root = Node("allocations of both snapshots")
    for name, dev, rows in parts:
        sub = allocation_list(dev, rows)
        sub.label = f"{name}: {sub.label}"
        sub.parent = root
        root.children.append(sub)
        root.value += sub.value
        root.count += sub.count
    return root


def allocation_list(dev: DeviceTrace, rows: np.ndarray, limit: int = 2000) -> Node:
    """A flat tree (root + one leaf per allocation, largest first) for the allocation list."""
    rows = np.asarray(rows, dtype=np.int64)
    sizes = dev.alloc_size[rows]
    order = np.lexsort((rows, -sizes))[:limit]
    snap = dev.snapshot
    sites = site_of_allocations(dev, rows[order])
    noun = "allocation" if len(rows) == 1 else "allocations"
    root = Node(f"{len(rows):,} {noun}", int(sizes.sum()), len(rows))
    for r, site in zip(rows[order].tolist(), sites.tolist()):
        name = frame_short_label(snap, site) if site >= 0 else NO_STACK_LABEL
        e = int(dev.alloc_event[r])
        when = f"event {e:,}" if e >= 0 else "before the trace"
        # count 0: a single allocation needs no "(1)" after it
        label = f"#{r} {name} · {when}"
        root.children.append(Node(label, int(dev.alloc_size[r]), 0, parent=root, row=r, dev=dev))
    return root

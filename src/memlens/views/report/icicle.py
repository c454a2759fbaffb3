"""The live call-stack tree at the peak, pruned for the icicle graph.

Nodes below a fraction of the total (0.1% by default) are merged into one "other" node per
parent, so the embedded tree stays small however many distinct stacks the trace has.
"""

from __future__ import annotations

from typing import Any

from memlens.analysis.tree import StackNode, live_tree
from memlens.snapshot.model import DeviceTrace, Snapshot

MIN_FRACTION = 0.001
MAX_DEPTH = 160


def compact_tree(
    root: StackNode,
    snap: Snapshot,
    *,
    min_fraction: float = MIN_FRACTION,
    max_depth: int = MAX_DEPTH,
) -> dict[str, Any]:
    """{"n": label, "b": bytes, "c": count, "f": "file:line" (optional), "k": [children]}.

    Children under `min_fraction` of the root's bytes are folded into "other (N nodes)";
    beyond `max_depth` levels the subtree is folded into its top node.
    """
    threshold = max(1, int(root.bytes * min_fraction))
    frames = snap.frames

    def walk(node: StackNode, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {"n": node.label, "b": int(node.bytes), "c": int(node.count)}
        if node.frame_id >= 0:
            fid = node.frame_id
            out["f"] = f"{snap.strings[frames.filename[fid]]}:{int(frames.line[fid])}"
        if depth >= max_depth or not node.children:
            return out
        kids, other_b, other_c, other_n = [], 0, 0, 0
        for child in node.sorted_children():
            if child.bytes >= threshold:
                kids.append(walk(child, depth + 1))
            else:
                other_b += child.bytes
                other_c += child.count
                other_n += 1
        if other_n:
            label = "other (1 small node)" if other_n == 1 else f"other ({other_n} small nodes)"
            kids.append({"n": label, "b": int(other_b), "c": int(other_c), "o": 1})
        out["k"] = kids
        return out

    return walk(root, 0)


def peak_trees(dev: DeviceTrace, event: int | None = None) -> dict[str, Any]:
    """Both views of the tree at `event` (default: the peak): Python frames only, and all."""
    event = dev.peak_event_index if event is None else event
    snap = dev.snapshot
    return {
        "event": int(event),
        "python": compact_tree(live_tree(dev, event, python_only=True), snap),
        "all": compact_tree(live_tree(dev, event, python_only=False), snap),
    }

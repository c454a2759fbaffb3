"""The live call-stack tree at the peak, for the icicle graph.

The tree and its pruning come from memlens.analysis.peak (nodes under 0.1% of the total
merged into one "<other>" node per parent); here it is only re-keyed compactly for the
page, so the embedded tree stays small however many distinct stacks the trace has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memlens.snapshot.model import DeviceTrace

MIN_SHARE = 0.001
MAX_DEPTH = 160
OTHER_LABEL = "<other>"


def compact(node: Mapping[str, Any]) -> dict[str, Any]:
    """{label, bytes, count, frame?, children} -> {"n", "b", "c", "f"?: "file:line", "k"?,
    "o": 1 for the merged small nodes}."""
    out: dict[str, Any] = {"n": node["label"], "b": int(node["bytes"]), "c": int(node["count"])}
    frame = node.get("frame")
    if frame:
        out["f"] = f"{frame['filename']}:{frame['line']}"
    if node["label"] == OTHER_LABEL and "frame" not in node:
        out["o"] = 1
    kids = node.get("children") or []
    if kids:
        out["k"] = [compact(k) for k in kids]
    return out


def peak_trees(
    dev: DeviceTrace, event: int | None = None, hide_patterns: Sequence[str] | None = None
) -> dict[str, Any]:
    """Both views of the tree at `event` (default: the peak): the user's Python frames (no
    internal frames, analysis.tree.internal_frame_mask, as in `memlens peak`), and all."""
    from memlens.analysis.peak import tree_dict

    event = dev.peak_event_index if event is None else event
    rows = dev.live_at(event)
    return {
        "event": int(event),
        **{
            view: compact(
                tree_dict(
                    dev,
                    rows,
                    python_only=py,
                    max_depth=MAX_DEPTH,
                    min_share=MIN_SHARE,
                    hide_internal=py,
                    hide_patterns=hide_patterns,
                )
            )
            for view, py in (("python", True), ("all", False))
        },
    }

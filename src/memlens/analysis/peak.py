"""What is live at the peak, or at any point of the trace: totals, call-stack tree, sites.

    peak(dev)                          # at the peak of active memory
    live_set(dev, event)               # right after any event (-1: before the first)
    memory_at_allocation(dev, addr, version, when="alloc"|"free")
    resolve_event(dev, Point(event=|time_us=|addr=, version=, when=))

"At an allocation" follows Mosaic's convention: `when="alloc"` is right after the alloc
event (the allocation is included), `when="free"` right after the free that returns its
memory (free_completed, so the allocation is no longer included). Versions count the
allocations made earlier at the same address (MemoryViz's `b'<addr>_<version>'`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from memlens.analysis.events import event_info, has_time
from memlens.analysis.results import Allocation, AllocationLiveSet, LiveSet, PeakResult, TreeNode
from memlens.analysis.sites import frame_label, site_of_allocations, top_sites
from memlens.analysis.tree import StackNode, build_stack_tree
from memlens.errors import MemlensError
from memlens.snapshot.model import GHOST, PREEXISTING, DeviceTrace

if TYPE_CHECKING:
    from typing_extensions import Unpack


class LiveSetOptions(TypedDict, total=False):
    """live_set's keyword options, which peak and memory_at_allocation pass through."""

    top: int
    hide_patterns: Sequence[str] | None
    tree: bool
    python_only: bool
    show_internal: bool
    tree_depth: int | None
    tree_min_share: float
    largest: int


def live_set(
    dev: DeviceTrace,
    event: int,
    *,
    top: int = 20,
    hide_patterns: Sequence[str] | None = None,
    tree: bool = True,
    python_only: bool = True,
    show_internal: bool = False,
    tree_depth: int | None = None,
    tree_min_share: float = 0.001,
    largest: int = 10,
) -> LiveSet:
    """Everything live right after `event` (-1: before the first event).

    Returns {"device", "event", "time_us", "action", "active_bytes", "reserved_bytes",
    "live_count", "by_site": [top_sites rows], "tree": {label, bytes, count, frame?,
    children}|None, "largest": [allocation rows]}. The tree is outermost frame first with
    byte totals at every level; nodes under `tree_min_share` of the total are merged into
    one "<other>" child per level, and `tree_depth` limits depth (None: full depth).
    python_only (default) keeps Python frames only; stacks with no Python frame at all
    (backward, C++ threads) go under one "<no Python frames: C++ / backward>" node with a
    child per site (e.g. the autograd node). In that Python view, internal frames
    (analysis.tree.internal_frame_mask: torch's own code such as nn.Module's `_call_impl`,
    the standard library, and what `hide_patterns` adds) are left out unless show_internal.
    """
    event = dev.check_event(event)
    rows = dev.live_at(event)
    return {
        "device": dev.device,
        **event_info(dev, event),
        "live_count": int(len(rows)),
        "by_site": top_sites(dev, rows, top=top, hide_patterns=hide_patterns),
        "tree": tree_dict(
            dev,
            rows,
            python_only=python_only,
            max_depth=tree_depth,
            min_share=tree_min_share,
            hide_internal=python_only and not show_internal,
            hide_patterns=hide_patterns,
        )
        if tree
        else None,
        "largest": allocation_rows(dev, _largest(dev, rows, largest), hide_patterns),
    }


def peak(dev: DeviceTrace, **kw: Unpack[LiveSetOptions]) -> PeakResult:
    """live_set at the peak of active memory (first event reaching it; -1 = the baseline).

    Adds "peak_active_bytes" and "peak_reserved_bytes" (the reserved peak may be
    elsewhere: "peak_reserved_event"). Keyword arguments as live_set.
    """
    return {
        **live_set(dev, dev.peak_event_index, **kw),
        "peak_active_bytes": dev.peak_active_bytes,
        "peak_reserved_bytes": dev.peak_reserved_bytes,
        "peak_reserved_event": dev.peak_reserved_event_index,
    }


def find_allocation(dev: DeviceTrace, addr: int, version: int | None = None) -> int:
    """The allocation row at `addr` with `version`; without a version the address must
    have exactly one allocation in the window. MemlensError otherwise."""
    rows = np.flatnonzero(dev.alloc_addr == np.uint64(addr))
    if len(rows) == 0:
        raise MemlensError(f"no allocation at address {addr:#x} on device {dev.device}")
    versions = sorted({int(v) for v in dev.alloc_version[rows]})
    if version is None:
        if len(rows) > 1:
            raise MemlensError(
                f"address {addr:#x} has {len(rows)} allocations (versions "
                f"{_ranges(versions)}); pass a version (--version V or ADDR_V)"
            )
        return int(rows[0])
    hit = rows[dev.alloc_version[rows] == version]
    if len(hit) == 0:
        raise MemlensError(
            f"address {addr:#x} has no version {version} (versions: {_ranges(versions)})"
        )
    return int(hit[0])


def parse_address(text: str) -> tuple[int, int | None]:
    """'0x7f00', '7f00', '0x7f00_3', "b'7f00_3'" -> (address, version or None)."""
    t = text.strip()
    if t.startswith(("b'", 'b"')) and t.endswith(("'", '"')):
        t = t[2:-1]
    elif t.startswith("b") and not t.startswith("0x"):
        t = t[1:]
    ver: int | None = None
    if "_" in t:
        t, v = t.rsplit("_", 1)
        try:
            ver = int(v)
        except ValueError:
            raise MemlensError(
                f"not an address: {text!r} (examples: 0x7f3a00, 0x7f3a00_2)"
            ) from None
    try:
        return int(t, 16), ver
    except ValueError:
        raise MemlensError(f"not an address: {text!r} (examples: 0x7f3a00, 0x7f3a00_2)") from None


def allocation_event(dev: DeviceTrace, row: int, when: str = "alloc") -> int:
    """The event index for "at the allocation" (alloc) or "at its free" (free)."""
    if when == "alloc":
        return int(dev.alloc_event[row])
    if when == "free":
        ev = int(dev.free_event[row])
        if ev >= dev.n_events:
            raise MemlensError(
                f"allocation {int(dev.alloc_addr[row]):#x}_{int(dev.alloc_version[row])} "
                "is never freed inside the trace"
            )
        return ev
    raise MemlensError(f"--when must be alloc or free, not {when!r}")


@dataclass(frozen=True)
class Point:
    """A point of the trace as `memlens at` names it: exactly one of an event index, a time
    (µs) or an allocation's address (with its `version`, and `when`: right after its alloc
    or right after its free)."""

    event: int | None = None
    time_us: int | None = None
    addr: int | None = None
    version: int | None = None
    when: str = "alloc"


def resolve_event(dev: DeviceTrace, point: Point) -> int:
    """`point` as an event index.

    time_us picks the last event at or before that time (-1 if before the first).
    An event index must be -1 (before the first event, as everywhere in memlens; -1 is NOT
    "last") or 0..n_events-1; other negative indices are refused (EventOutOfRange), they do
    not count from the end: use n_events-1 for the last event.
    """
    given = sum(x is not None for x in (point.event, point.time_us, point.addr))
    if given != 1:
        raise MemlensError("give exactly one of an event index, a time (µs) or an address")
    if point.event is not None:
        return dev.check_event(point.event)
    if point.time_us is not None:
        if not has_time(dev):
            raise MemlensError("this trace has no timestamps (time_us); use an event index")
        return dev.event_at_time(int(point.time_us))
    assert point.addr is not None  # exactly one of the three was given
    row = find_allocation(dev, int(point.addr), point.version)
    return allocation_event(dev, row, point.when)


def memory_at_allocation(
    dev: DeviceTrace,
    addr: int,
    version: int | None = None,
    when: str = "alloc",
    **kw: Unpack[LiveSetOptions],
) -> AllocationLiveSet:
    """live_set at an allocation's alloc (or free) event, plus "allocation": the row."""
    row = find_allocation(dev, addr, version)
    ev = allocation_event(dev, row, when)
    return {
        **live_set(dev, ev, **kw),
        "when": when,
        "allocation": allocation_rows(dev, np.asarray([row]), kw.get("hide_patterns"))[0],
    }


def allocation_rows(
    dev: DeviceTrace, rows: np.ndarray, hide_patterns: Sequence[str] | None = None
) -> list[Allocation]:
    """Allocation rows as JSON dicts (address hex, version, size, events, flags, site)."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) == 0:
        return []
    site = site_of_allocations(dev, rows, hide_patterns)
    snap = dev.snapshot
    out: list[Allocation] = []
    n = dev.n_events
    for r, s in zip(rows.tolist(), site.tolist()):
        flags = int(dev.alloc_flags[r])
        fe = int(dev.free_event[r])
        out.append(
            {
                "row": r,
                "address": f"{int(dev.alloc_addr[r]):#x}",
                "version": int(dev.alloc_version[r]),
                "bytes": int(dev.alloc_size[r]),
                "alloc_event": int(dev.alloc_event[r]),
                "free_requested_event": int(dev.free_requested_event[r]),
                "free_event": fe if fe < n else None,
                "preexisting": bool(flags & PREEXISTING),
                "ghost": bool(flags & GHOST),
                "stream": int(snap.streams[int(dev.alloc_stream[r])])
                if 0 <= int(dev.alloc_stream[r]) < len(snap.streams)
                else None,
                "site": frame_label(snap, s),
            }
        )
    return out


def tree_dict(
    dev: DeviceTrace,
    rows: np.ndarray,
    *,
    python_only: bool = False,
    max_depth: int | None = None,
    min_share: float = 0.0,
    hide_internal: bool = False,
    hide_patterns: Sequence[str] | None = None,
) -> TreeNode:
    """The call-stack tree of allocation `rows` as a dict, pruned (see live_set)."""
    root = build_stack_tree(
        dev.snapshot,
        dev.alloc_stack[rows],
        dev.alloc_size[rows],
        python_only=python_only,
        hide_internal=hide_internal,
        hide_patterns=hide_patterns,
    )
    return prune_tree(root, dev, max_depth=max_depth, min_bytes=int(root.bytes * min_share))


def prune_tree(
    root: StackNode, dev: DeviceTrace, *, max_depth: int | None = None, min_bytes: int = 0
) -> TreeNode:
    """StackNode -> dict; children under `min_bytes` are merged into one "<other>" node."""

    def walk(node: StackNode, depth: int) -> TreeNode:
        d = node.to_dict(dev.snapshot, max_depth=0)  # children: []
        if max_depth is not None and depth >= max_depth:
            return d
        kids: list[TreeNode] = []
        other_b, other_c = 0, 0
        for c in node.sorted_children():
            if c.bytes >= min_bytes and (c.bytes > 0 or min_bytes == 0):
                kids.append(walk(c, depth + 1))
            else:
                other_b += c.bytes
                other_c += c.count
        if other_c:
            kids.append({"label": "<other>", "bytes": other_b, "count": other_c, "children": []})
        d["children"] = kids
        return d

    return walk(root, 0)


def _largest(dev: DeviceTrace, rows: np.ndarray, k: int) -> np.ndarray:
    if k <= 0 or len(rows) == 0:
        return rows[:0]
    sizes = dev.alloc_size[rows]
    order = np.lexsort((rows, -sizes))[:k]
    return rows[order]


def _ranges(vs: list[int]) -> str:
    if len(vs) > 6:
        return f"{vs[0]}..{vs[-1]}"
    return ", ".join(map(str, vs))


def tree_options(
    top: int,
    depth: int | None,
    all_frames: bool,
    min_share: float,
    hide: Sequence[str] | None,
    show_internal: bool = False,
) -> LiveSetOptions:
    """The options of `memlens peak` and `memlens at` (their --top, --depth, --all-frames,
    --show-internal, --min-share, --hide) as live_set's keywords."""
    return {
        "top": top,
        "tree_depth": depth,
        "python_only": not all_frames,
        "show_internal": show_internal,
        "tree_min_share": min_share,
        "hide_patterns": hide,
    }


def peak_output(
    dev: DeviceTrace,
    *,
    event: int | None = None,
    top: int = 15,
    depth: int | None = None,
    all_frames: bool = False,
    min_share: float = 0.005,
    hide_patterns: Sequence[str] | None = None,
    show_internal: bool = False,
) -> PeakResult | LiveSet:
    """`memlens peak`: the live set at the peak, or after `event`."""
    kw = tree_options(top, depth, all_frames, min_share, hide_patterns, show_internal)
    return peak(dev, **kw) if event is None else live_set(dev, event, **kw)


def check_one_point(options: Mapping[str, Any]) -> None:
    """`memlens at` names exactly one point (checked before the snapshot is read)."""
    if sum(options[k] is not None for k in ("event", "time_us", "addr")) != 1:
        raise MemlensError("give exactly one of --event, --time-us or --addr")


def at_output(
    dev: DeviceTrace,
    *,
    event: int | None = None,
    time_us: int | None = None,
    addr: str | None = None,
    version: int | None = None,
    when: str = "alloc",
    top: int = 15,
    depth: int | None = None,
    all_frames: bool = False,
    min_share: float = 0.005,
    hide_patterns: Sequence[str] | None = None,
    show_internal: bool = False,
) -> LiveSet | AllocationLiveSet:
    """`memlens at`: the live set after `event`, at `time_us`, or at the alloc (or free,
    `when`) of the allocation at `addr` ("0x7f3a00" or "0x7f3a00_V"; `version` V)."""
    check_one_point({"event": event, "time_us": time_us, "addr": addr})
    kw = tree_options(top, depth, all_frames, min_share, hide_patterns, show_internal)
    if addr is not None:
        a, v = parse_address(addr)
        return memory_at_allocation(dev, a, version if version is not None else v, when, **kw)
    return live_set(dev, resolve_event(dev, Point(event, time_us)), **kw)

"""A deliberately naive, per-event port of PyTorch MemoryViz's `process_alloc_data`
(reference §2.3), used as the oracle for memlens's vectorized replay. Slow and obvious on
purpose: one Python dict, one loop, no numpy."""

from __future__ import annotations

from typing import Any


def memoryviz_replay(snapshot: dict[str, Any], device: int = 0) -> dict[str, Any]:
    trace = snapshot["device_traces"][device] if device < len(snapshot["device_traces"]) else []
    has_completed = any(e["action"] == "free_completed" for e in trace)
    free_kinds = {"free_completed"} if has_completed else {"free_requested"}
    elements: list[dict[str, Any]] = []
    initially_allocated: list[int] = []
    actions: list[int] = []
    action_event: list[int] = []
    open_: dict[int, int] = {}
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            elements.append({"size": e["size"], "addr": e["addr"]})
            open_[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
            action_event.append(i)
        elif e["action"] in free_kinds:
            if e["addr"] in open_:
                actions.append(open_.pop(e["addr"]))
                action_event.append(i)
            else:
                elements.append({"size": e["size"], "addr": e["addr"]})
                initially_allocated.append(len(elements) - 1)
                actions.append(len(elements) - 1)
                action_event.append(i)
    for seg in snapshot["segments"]:
        if seg.get("device", 0) != device:
            continue
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and b["address"] not in open_:
                elements.append({"size": b["requested_size"], "addr": b["address"]})
                initially_allocated.append(len(elements) - 1)
    on_stack: set[int] = set()
    total = 0
    for idx in initially_allocated:
        on_stack.add(idx)
        total += elements[idx]["size"]
    baseline = total
    curve = {}
    max_size = 0
    for idx, ev in zip(actions, action_event):
        if idx not in on_stack:
            on_stack.add(idx)
            total += elements[idx]["size"]
        else:
            on_stack.remove(idx)
            total -= elements[idx]["size"]
        curve[ev] = total
        max_size = max(max_size, total)
    # active bytes after every event (non-action events keep the previous value)
    after = []
    cur = baseline
    for i in range(len(trace)):
        cur = curve.get(i, cur)
        after.append(cur)
    return {"baseline": baseline, "max_size": max_size, "active_after": after}


def naive_reserved(snapshot: dict[str, Any], device: int = 0) -> tuple[int, list[int]]:
    trace = snapshot["device_traces"][device] if device < len(snapshot["device_traces"]) else []
    end = sum(s["total_size"] for s in snapshot["segments"] if s.get("device", 0) == device)
    sign = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}
    change = sum(sign.get(e["action"], 0) * e["size"] for e in trace)
    cur = end - change
    start = cur
    out = []
    for e in trace:
        cur += sign.get(e["action"], 0) * e["size"]
        out.append(cur)
    return start, out

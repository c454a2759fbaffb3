"""Text for the status lines and the allocation view (plain strings, so tests read them)."""

from __future__ import annotations

from memlens.snapshot.frames import CPP, NOISE, short_cpp_name
from memlens.snapshot.model import GHOST, LIVE_AT_END, PENDING_FREE, PREEXISTING, DeviceTrace
from memlens.units import format_bytes
from memlens.views.tui.chart import Timeline, Viewport


def event_time(dev: DeviceTrace, event: int) -> str:
    """'t+1.234567 s' from the first event, or '' when the trace has no timestamps."""
    if event < 0 or dev.n_events == 0 or dev.time_us[0] < 0:
        return ""
    return f"t+{(int(dev.time_us[event]) - int(dev.time_us[0])) / 1e6:.6f} s"


def summary_line(name: str, dev: DeviceTrace) -> str:
    """The one-line summary shown on start."""
    peak_at = f"event {dev.peak_event_index:,}" if dev.peak_event_index >= 0 else "before the trace"
    return (
        f"{name} · device {dev.device} · {dev.n_events:,} events · "
        f"peak {format_bytes(dev.peak_active_bytes)} at {peak_at} · "
        f"reserved peak {format_bytes(dev.peak_reserved_bytes)} · "
        f"end {format_bytes(dev.end_active_bytes)} · {dev.n_allocations:,} allocations"
    )


def current_stage(timeline: Timeline, event: int) -> str:
    """Name of the innermost stage open at `event` (START seen, its END not yet)."""
    return timeline.stage_at(event)


def cursor_line(dev: DeviceTrace, timeline: Timeline, view: Viewport) -> str:
    """Where the cursor is: event, action, time, memory, zoom, floor, stage."""
    if dev.n_events == 0:
        return "no events in this trace"
    e = min(view.cursor, dev.n_events - 1)
    parts = [f"event {e:,}/{dev.n_events:,} {dev.action_name(e)} {format_bytes(int(dev.size[e]))}"]
    t = event_time(dev, e)
    if t:
        parts.append(t)
    parts.append(f"active {format_bytes(dev.active_at(e))}")
    parts.append(f"reserved {format_bytes(dev.reserved_at(e))}")
    parts.append(f"{view.bucket:,} ev/col")
    if view.floor:
        parts.append(f"floor {format_bytes(view.floor)}")
    stage = current_stage(timeline, e)
    if stage:
        parts.append(f"stage {stage}")
    return " · ".join(parts)


def _event_text(dev: DeviceTrace, event: int) -> str:
    t = event_time(dev, event)
    return f"event {event:,}" + (f" ({t})" if t else "")


def describe_allocation(dev: DeviceTrace, row: int) -> list[str]:
    """Everything known about one allocation: size, place, lifetime and its full stack."""
    snap = dev.snapshot
    flags = int(dev.alloc_flags[row])
    a, fr, f = (
        int(dev.alloc_event[row]),
        int(dev.free_requested_event[row]),
        int(dev.free_event[row]),
    )
    lines = [
        f"allocation #{row}: {format_bytes(int(dev.alloc_size[row]))} "
        f"({int(dev.alloc_size[row]):,} bytes requested)",
        f"address   0x{int(dev.alloc_addr[row]):x} (version {int(dev.alloc_version[row])}), "
        f"stream {snap.streams[int(dev.alloc_stream[row])]:#x}",
        "allocated " + (_event_text(dev, a) if a >= 0 else "before the trace started"),
    ]
    if fr >= 0:
        lines.append("free req. " + _event_text(dev, fr))
    if f < dev.n_events:
        lines.append("freed     " + _event_text(dev, f))
    else:
        lines.append("freed     never: alive at the end of the trace")
    first, last = max(a, 0), min(f, dev.n_events - 1)
    life = f"lifetime  {last - first:,} events"
    if a >= 0 and event_time(dev, first):
        life += f", {(int(dev.time_us[last]) - int(dev.time_us[first])) / 1e6:.6f} s"
    lines.append(life + (" (at least)" if a < 0 or f >= dev.n_events else ""))
    notes = [
        text
        for bit, text in (
            (PREEXISTING, "allocated before the trace window"),
            (GHOST, "known only from the final segments"),
            (LIVE_AT_END, "still allocated after the last event"),
            (PENDING_FREE, "free requested, not completed"),
        )
        if flags & bit
    ]
    if notes:
        lines.append("notes     " + "; ".join(notes))
    frames = snap.stacks.frames_of(int(dev.alloc_stack[row])).tolist()
    lines.append("")
    lines.append(
        f"stack ({len(frames)} frames, innermost first):" if frames else "no stack recorded"
    )
    f_ = snap.frames
    for fid in frames:
        kind = int(f_.kind[fid])
        name, fname = snap.strings[f_.name[fid]], snap.strings[f_.filename[fid]]
        line = int(f_.line[fid])
        if kind in (CPP, NOISE):  # demangled C++ signatures run to hundreds of characters
            tag = "[C++] " if kind == CPP else "[noise] "
            where = "" if fname in ("", "??") else f"  {fname}" + (f":{line}" if line else "")
            lines.append(f"  {tag}{short_cpp_name(name)}{where}")
        else:
            lines.append(f"  {name}  {fname}:{line}")
    return lines

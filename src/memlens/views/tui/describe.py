"""Text for the status lines and the allocation view (plain strings, so tests read them)."""

from __future__ import annotations

import os

import numpy as np

from memlens.analysis.allocations import flag_notes, life_events
from memlens.analysis.pools import pool_bytes_at, private_pools
from memlens.snapshot.actions import Action
from memlens.snapshot.frames import CPP, NOISE, short_cpp_name
from memlens.snapshot.model import DeviceTrace
from memlens.units import format_bytes
from memlens.views.text.summary import pool_text, pools_worth_a_line
from memlens.views.tui.chart import Timeline, Viewport


def event_time(dev: DeviceTrace, event: int) -> str:
    """'t+1.234567 s' from the first event, or '' when the trace has no timestamps."""
    if event < 0 or dev.n_events == 0 or dev.time_us[0] < 0:
        return ""
    return f"t+{(int(dev.time_us[event]) - int(dev.time_us[0])) / 1e6:.6f} s"


def wall_span_us(dev: DeviceTrace) -> int:
    """Microseconds from the first event to the last (-1 when the trace has no times)."""
    if dev.n_events == 0 or dev.time_us[0] < 0:
        return -1
    t = dev.monotonic_time_us
    return int(t[-1]) - int(t[0])


def summary_parts(name: str, dev: DeviceTrace) -> list[str]:
    """The summary shown on start, in parts that are never split across lines."""
    peak_at = f"event {dev.peak_event_index:,}" if dev.peak_event_index >= 0 else "before the trace"
    span = wall_span_us(dev)
    return [
        name,
        f"device {dev.device}",
        f"{dev.n_events:,} events" + (f" over {span / 1e6:.3f} s" if span >= 0 else ""),
        f"peak {format_bytes(dev.peak_active_bytes)} at {peak_at}",
        f"reserved peak {format_bytes(dev.peak_reserved_bytes)}",
        f"end {format_bytes(dev.end_active_bytes)}",
        f"{dev.n_allocations:,} allocations",
    ]


def wrap_parts(parts: list[str], width: int, max_lines: int, sep: str = " · ") -> list[str]:
    """Parts joined by `sep` into lines of at most `width`, breaking only between parts;
    the last allowed line takes the rest (and is cut by whoever draws it)."""
    lines: list[str] = []
    for part in parts:
        if lines and (len(lines) == max_lines or len(lines[-1]) + len(sep) + len(part) <= width):
            lines[-1] += sep + part
        else:
            lines.append(part)
    return lines


def current_stage(timeline: Timeline, event: int) -> str:
    """Name of the innermost stage open at `event` (START seen, its END not yet)."""
    return timeline.stage_at(event)


def cursor_line(dev: DeviceTrace, timeline: Timeline, view: Viewport) -> str:
    """Where the cursor is: event, action, time, memory, stage."""
    if dev.n_events == 0:
        return "no events in this trace"
    e = min(view.cursor, dev.n_events - 1)
    parts = [f"event {e:,} {dev.action_name(e)} {format_bytes(int(dev.size[e]))}"]
    if dev.action[e] == Action.OOM:  # the request failed; addr holds the driver's free bytes
        parts[0] += f" requested, {format_bytes(int(dev.addr[e]))} free on the device"
    t = event_time(dev, e)
    if t:
        parts.append(t)
    parts.append(f"active {format_bytes(dev.active_at(e))}")
    parts.append(f"reserved {format_bytes(dev.reserved_at(e))}")
    stage = current_stage(timeline, e)
    if stage:
        parts.append(f"stage {stage}")
    return " · ".join(parts)


def view_line(view: Viewport) -> str:
    """What the chart shows: events per column, the visible events, the y floor."""
    if view.n_events == 0:
        return ""
    first = view.start * view.bucket
    last = min((view.start + view.width) * view.bucket, view.n_events) - 1
    parts = [
        f"{view.bucket:,} event{'s' if view.bucket > 1 else ''}/column",
        f"events {first:,}–{last:,} of {view.n_events:,} shown",
    ]
    if view.floor:
        parts.append(f"y floor {format_bytes(view.floor)}")
    return " · ".join(parts)


def _event_text(dev: DeviceTrace, event: int) -> str:
    t = event_time(dev, event)
    return f"event {event:,}" + (f" ({t})" if t else "")


def describe_allocation(dev: DeviceTrace, row: int) -> list[str]:
    """Everything known about one allocation: size, place, lifetime and its full stack."""
    snap = dev.snapshot
    a, fr, f = life_events(dev, row)
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
    notes = flag_notes(dev, row)
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


def time_weighted_average(dev: DeviceTrace) -> tuple[float, str]:
    """Mean active bytes over wall time (each value holds until the next event), or over
    events when the trace has no timestamps or spans no time; and which one it is."""
    active = dev.active_after.astype(np.float64)
    span = wall_span_us(dev)
    if span > 0:
        return float(np.dot(active[:-1], np.diff(dev.monotonic_time_us)) / span), "over time"
    return float(active.mean()), "over events"


def summary_figures(dev: DeviceTrace) -> list[str]:
    """The figures of the summary screen (passes over every event and allocation: the
    screen keeps them once made)."""
    snap = dev.snapshot
    n = dev.n_events
    source = snap.source
    lines = []
    if os.path.isfile(source):
        size = os.path.getsize(source)
        how = "read from the column cache" if snap.from_cache else "parsed from the pickle"
        lines.append(f"file           {format_bytes(size)} ({size:,} bytes), {how}")
    devices = ", ".join(str(d) for d in snap.devices)
    lines.append(f"devices        {devices} (showing device {dev.device})")
    span = wall_span_us(dev)
    lines.append(f"events         {n:,}" + (f" over {span / 1e6:.6f} s" if span >= 0 else ""))
    if len(snap.annotations):
        lines.append(f"annotations    {len(snap.annotations):,}")
    avg, how = time_weighted_average(dev)
    lowest = min(int(dev.active_after.min()), dev.baseline_bytes) if n else dev.baseline_bytes
    peak_at = f"event {dev.peak_event_index:,}" if dev.peak_event_index >= 0 else "before the trace"
    lines += [
        "",
        "active memory (bytes requested by live tensors)",
        f"  initial      {format_bytes(dev.baseline_bytes)} (before the first event)",
        f"  minimum      {format_bytes(lowest)}",
        f"  average      {format_bytes(avg)} ({how})",
        f"  peak         {format_bytes(dev.peak_active_bytes)} at {peak_at}",
        f"  final        {format_bytes(dev.end_active_bytes)}",
        "reserved memory (segments held from CUDA)",
        f"  initial      {format_bytes(dev.reserved_start_bytes)}",
        f"  peak         {format_bytes(dev.peak_reserved_bytes)}",
        f"  final        {format_bytes(dev.end_reserved_bytes)}",
    ]
    pools = pool_bytes_at(dev, dev.peak_event_index)
    if pools_worth_a_line(pools, private_pools(dev)):  # as `memlens summary`
        lines.append("pools at peak  " + "; ".join(map(pool_text, pools)))
    sizes = dev.alloc_size
    made = dev.alloc_event >= 0
    live_end = dev.free_event >= n
    lines += [
        "",
        f"allocations    {dev.n_allocations:,} ({int(made.sum()):,} made in the trace, "
        f"{dev.n_allocations - int(made.sum()):,} before it)",
        f"  live at end  {int(live_end.sum()):,} ({format_bytes(int(sizes[live_end].sum()))})",
    ]
    if len(sizes):
        lines += [
            f"  smallest     {format_bytes(int(sizes.min()))}",
            f"  largest      {format_bytes(int(sizes.max()))}",
            f"  mean         {format_bytes(float(sizes.mean()))}",
            f"  median       {format_bytes(float(np.median(sizes)))}",
            f"  cumulative   {format_bytes(int(sizes[made].sum()))} allocated in the trace",
        ]
    return lines

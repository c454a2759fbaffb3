"""Memory as Chrome Trace Event Format tracks (`memlens export --chrome-trace`), alone or
merged into a torch.profiler trace so Perfetto shows memory under the kernels.

Per device, one pseudo-process "GPU d memory (memlens)" holds two counter tracks ("C"
events), `allocated` (active bytes, `memlens summary`'s peak_active_bytes) and `reserved`,
and a "stages" thread with the annotated stages as slices: complete events ("X") where
both ends were recorded, begin/end pairs ("B"/"E") cut at the trace's edges where one end
is missing (args.open_start / open_end say which). OOM entries are instant events.

Clock: a trace entry's time_us is microseconds since the Unix epoch (PyTorch's
ApproximateClock converted to wall-clock time). torch.profiler (Kineto) writes `ts` in
microseconds relative to the trace's `baseTimeNanoseconds` (epoch nanoseconds; older
versions wrote epoch microseconds and no base), so ts = time_us - baseTimeNanoseconds/1000.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from memlens.analysis.devices import traced_devices
from memlens.analysis.stages import stage_intervals
from memlens.errors import MemlensError
from memlens.snapshot.actions import Action
from memlens.snapshot.assemble.checks import glimpse
from memlens.snapshot.model import DeviceTrace, Snapshot

# pid of device d's tracks: far from real process ids, so a merged trace keeps them apart
PID_BASE = 0x6D656D00  # "mem\0"
STAGES_TID = 1
Event = dict[str, Any]


def counter_samples(times: np.ndarray, values: np.ndarray, before: int) -> list[tuple[int, int]]:
    """(time_us, bytes) steps of one curve. Entries that share a microsecond become one
    sample with the value after the last of them, preceded by their maximum where it is
    higher (so the peak is a sample even inside one microsecond); repeats are dropped."""
    n = len(times)
    if n == 0:
        return []
    starts = np.flatnonzero(np.r_[True, times[1:] != times[:-1]])
    ends = np.r_[starts[1:], n] - 1
    highest = np.maximum.reduceat(values, starts)
    last = values[ends]
    t = times[starts]
    # (t, max) before (t, last) where max > last; groups stay in trace order
    extra = np.flatnonzero(highest > last)
    group = np.r_[extra, np.arange(len(t))]
    kind = np.r_[np.zeros(len(extra), np.int8), np.ones(len(t), np.int8)]
    order = np.lexsort((kind, group))
    ts = np.r_[t[extra], t][order]
    vs = np.r_[highest[extra], last][order]
    # the value before the first entry, at its time
    ts = np.r_[times[0], ts]
    vs = np.r_[before, vs]
    keep = np.r_[True, vs[1:] != vs[:-1]]
    return list(zip(ts[keep].tolist(), vs[keep].tolist()))


def _timed(dev: DeviceTrace) -> bool:
    return dev.n_events > 0 and bool(np.all(dev.time_us >= 0))


def device_events(dev: DeviceTrace, base_us: int = 0) -> list[Event]:
    """The trace events of one device (metadata, counters, stages, OOMs), ts = time_us - base_us."""
    pid = PID_BASE + dev.device
    times = np.asarray(dev.time_us, dtype=np.int64)
    out: list[Event] = [
        {"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
         "args": {"name": f"GPU {dev.device} memory (memlens)"}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
         "args": {"sort_index": -1000 + dev.device}},
        {"name": "thread_name", "ph": "M", "pid": pid, "tid": STAGES_TID,
         "args": {"name": "stages"}},
    ]  # fmt: skip
    for name, curve, before in (
        ("allocated", dev.active_after, dev.baseline_bytes),
        ("reserved", dev.reserved_after, dev.reserved_start_bytes),
    ):
        out += [
            {"name": name, "ph": "C", "ts": t - base_us, "pid": pid, "args": {"bytes": v}}
            for t, v in counter_samples(times, np.asarray(curve, dtype=np.int64), int(before))
        ]
    first, last = int(times.min()), int(times.max())
    for s in stage_intervals(dev):
        t0, t1 = s["start_time_us"], s["end_time_us"]
        common = {"name": s["name"], "cat": "stage", "pid": pid, "tid": STAGES_TID}
        if t0 is not None and t1 is not None:
            out.append({**common, "ph": "X", "ts": t0 - base_us, "dur": max(t1 - t0, 0)})
            continue
        args = {"open_start": t0 is None, "open_end": t1 is None}
        begin = first if t0 is None else t0
        end = max(last if t1 is None else t1, begin)
        out.append({**common, "ph": "B", "ts": begin - base_us, "args": args})
        out.append({**common, "ph": "E", "ts": end - base_us})
    for i in np.flatnonzero(dev.action == Action.OOM).tolist():
        out.append(
            {
                "name": "CUDA out of memory",
                "ph": "i",
                "s": "p",
                "ts": int(times[i]) - base_us,
                "pid": pid,
                "tid": STAGES_TID,
                "args": {
                    "requested_bytes": int(dev.size[i]),
                    "device_free_bytes": int(dev.addr[i]),
                },
            }
        )
    return out


def memory_events(
    snap: Snapshot, devices: list[int] | None = None, base_us: int = 0
) -> list[Event]:
    """Every timed device's events (or `devices`'). A trace without timestamps cannot be
    placed on a clock: MemlensError."""
    chosen = devices if devices is not None else traced_devices(snap)
    out: list[Event] = []
    for d in chosen:
        dev = snap.device(d)
        if not _timed(dev):
            if devices is not None or dev.n_events:
                raise MemlensError(
                    f"device {d} has no timestamps (time_us) on its trace entries: it cannot "
                    "be placed on a trace's clock (recorded with PyTorch before 2.2?)"
                )
            continue
        out += device_events(dev, base_us)
    if not out:
        raise MemlensError("the snapshot has no trace entries to export")
    return out


def chrome_trace(snap: Snapshot, devices: list[int] | None = None) -> dict[str, Any]:
    """A trace of its own (JSON object format), ts = time_us (epoch microseconds)."""
    return {
        "traceEvents": memory_events(snap, devices),
        "displayTimeUnit": "ms",
        "otherData": {"memlens": {"source": snap.source, "clock": "time_us (epoch microseconds)"}},
    }


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def read_trace(path: str | Path) -> dict[str, Any]:
    """A Chrome trace file (JSON object or array format) as the object format. A side input
    is checked like a snapshot: one line for anything that is not a trace (NaN, an integer
    of thousands of digits, nesting past Python's recursion limit), and a base time that
    could not be a clock (baseTimeNanoseconds outside 0..2^63) is refused."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.loads(fh.read(), parse_constant=_no_constant)
    except OSError as exc:
        raise MemlensError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise MemlensError(f"{path} is not a JSON trace ({exc})") from None
    except RecursionError:
        raise MemlensError(f"{path} is not a JSON trace (nested too deeply)") from None
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise MemlensError(f"{path} is not a Chrome trace (no traceEvents list)")
    base = data.get("baseTimeNanoseconds")
    if base is not None and (
        isinstance(base, bool) or not isinstance(base, int) or not 0 <= base < 1 << 63
    ):
        raise MemlensError(
            f"{path}: baseTimeNanoseconds is not a time (an integer of nanoseconds since "
            f"1970, 0..2^63): {glimpse(base)}"
        )
    return data


def profiler_base_us(trace: dict[str, Any]) -> int:
    """The epoch microsecond that the trace's ts count from (0 if ts are already epoch)."""
    base = trace.get("baseTimeNanoseconds")
    if isinstance(base, bool) or not isinstance(base, int) or not 0 <= base < 1 << 63:
        return 0
    return base // 1000


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _span(events: list[Any]) -> tuple[float, float] | None:
    """(first ts, last ts + dur) over the timed events, or None if none is timed."""
    times: list[float] = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") == "M" or not _is_number(e.get("ts")):
            continue
        times.append(e["ts"])
        if _is_number(e.get("dur")):
            times.append(e["ts"] + e["dur"])
    return (min(times), max(times)) if times else None


def merge(
    snap: Snapshot, trace: dict[str, Any], devices: list[int] | None = None
) -> tuple[dict[str, Any], bool]:
    """`trace` (a torch.profiler Chrome trace) with the memory tracks added on its clock;
    and whether the two time ranges overlap (False: probably not the same run)."""
    base = profiler_base_us(trace)
    ours = memory_events(snap, devices, base)
    theirs, mine = _span(trace["traceEvents"]), _span(ours)
    overlap = theirs is None or (mine is not None and mine[0] <= theirs[1] and mine[1] >= theirs[0])
    merged = dict(trace)
    merged["traceEvents"] = [*trace["traceEvents"], *ours]
    return merged, overlap


def write_trace(trace: dict[str, Any], path: str | Path) -> None:
    # json.dumps, not json.dump: only the one-shot encoder is the C one (3x faster here)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(trace, separators=(",", ":")))

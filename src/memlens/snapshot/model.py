"""The columnar snapshot model.

Everything per event or per allocation is a numpy column; frames and stacks are interned
once (a million events share a few thousand distinct stacks), and strings live in one
table. No per-event Python object is held, so a 5M-event snapshot costs tens of bytes
per event and opens memory-mapped from the cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from memlens.errors import EventOutOfRange, MemlensError
from memlens.snapshot.actions import KNOWN_ACTIONS, Action
from memlens.snapshot.annotations import Annotations, annotation_columns
from memlens.units import format_bytes

# Allocation flags (bit set in DeviceTrace.alloc_flags)
PREEXISTING = 1  # allocated before the trace window (orphan free or ghost block)
GHOST = 2  # known only from the final segments (active_allocated, no event in the trace)
LIVE_AT_END = 4  # still allocated after the last event
PENDING_FREE = 8  # free_requested seen, free_completed not (still holds memory)
OVERWRITTEN = 16  # its address was allocated again without a free in between


@dataclass
class Frames:
    """Interned frames. kind: 0 python, 1 C++, 2 recording/interpreter noise."""

    filename: np.ndarray  # int32 ids into Snapshot.strings
    line: np.ndarray  # int64
    name: np.ndarray  # int32 ids into Snapshot.strings
    kind: np.ndarray  # uint8

    def __len__(self) -> int:
        return len(self.line)


@dataclass
class Stacks:
    """CSR layout: frames of stack s are frame_ids[offsets[s]:offsets[s+1]], innermost first."""

    offsets: np.ndarray  # int64, len n_stacks + 1
    frame_ids: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def frames_of(self, stack_id: int) -> np.ndarray:
        if stack_id < 0:
            return self.frame_ids[:0]
        return self.frame_ids[self.offsets[stack_id] : self.offsets[stack_id + 1]]


def _peak(start: int, after: np.ndarray) -> tuple[int, int]:
    """The highest of a curve: `start` (before the first event) or `after[i]`, and the first
    event reaching it; -1 when nothing in the trace rises above the start."""
    if len(after) == 0:
        return start, -1
    i = int(np.argmax(after))
    top = int(after[i])
    if start >= top:
        return start, -1
    return top, i


@dataclass
class DeviceTrace:
    """One device: its events, and the replay of them into allocations and curves."""

    device: int
    snapshot: Snapshot = field(repr=False)
    # events (one row per trace entry, in trace order)
    action: np.ndarray  # uint8, Action codes
    addr: np.ndarray  # uint64 (for oom: device_free)
    size: np.ndarray  # int64
    stream: np.ndarray  # int32 index into Snapshot.streams
    time_us: np.ndarray  # int64, -1 where absent
    stack: np.ndarray  # int32, -1 = no frames
    pool: np.ndarray  # int16 index into Snapshot.pools, -1 = the entry has no pool_id
    compile_context: np.ndarray  # int32 string id, -1 = none ("N/A")
    user_metadata: np.ndarray  # int32 string id, -1 = none ("")
    forward_stack: np.ndarray  # int32 string id of the joined forward_frames, -1 = none
    version: np.ndarray  # int32: per-address version of the allocation an event belongs to
    alloc_row: np.ndarray  # int32: allocation row an alloc/free event belongs to, -1 otherwise
    # allocations (one row per allocation lifetime)
    alloc_event: np.ndarray  # int64, -1 = before the trace
    free_requested_event: np.ndarray  # int64, -1 = none seen
    free_event: np.ndarray  # int64, n_events = still alive at the end
    alloc_addr: np.ndarray  # uint64
    alloc_version: np.ndarray  # int32
    alloc_size: np.ndarray  # int64, requested bytes
    alloc_stack: np.ndarray  # int32
    alloc_stream: np.ndarray  # int32
    alloc_flags: np.ndarray  # uint8
    # curves over events
    active_after: np.ndarray  # int64: active (requested) bytes after event i
    reserved_after: np.ndarray  # int64: reserved bytes after event i
    baseline_bytes: int
    reserved_start_bytes: int
    frees_from_requested: bool = False  # trace had no free_completed: free_requested used

    @property
    def n_events(self) -> int:
        return len(self.action)

    @property
    def n_allocations(self) -> int:
        return len(self.alloc_size)

    # ---- headline figures -------------------------------------------------------------
    @cached_property
    def _active_peak(self) -> tuple[int, int]:
        return _peak(self.baseline_bytes, self.active_after)

    @property
    def peak_active_bytes(self) -> int:
        return self._active_peak[0]

    @property
    def peak_event_index(self) -> int:
        """First event after which active bytes equal the peak; -1 if the baseline is it."""
        return self._active_peak[1]

    @property
    def end_active_bytes(self) -> int:
        return int(self.active_after[-1]) if self.n_events else self.baseline_bytes

    @cached_property
    def _reserved_peak(self) -> tuple[int, int]:
        return _peak(self.reserved_start_bytes, self.reserved_after)

    @property
    def peak_reserved_bytes(self) -> int:
        return self._reserved_peak[0]

    @property
    def peak_reserved_event_index(self) -> int:
        return self._reserved_peak[1]

    @property
    def end_reserved_bytes(self) -> int:
        return int(self.reserved_after[-1]) if self.n_events else self.reserved_start_bytes

    # ---- queries ------------------------------------------------------------------------
    def check_event(self, event: int) -> int:
        """`event` as an int if it is in this trace (-1: before the first event), else
        EventOutOfRange; every query and analysis that takes an event index checks it here."""
        event = int(event)
        if event < -1 or event >= self.n_events:
            if self.n_events == 0:
                raise EventOutOfRange(
                    f"event {event}: device {self.device} has no trace events "
                    "(only -1, the state the segments describe, can be asked for)"
                )
            raise EventOutOfRange(
                f"event {event} is outside this trace (events 0..{self.n_events - 1}, "
                "or -1 for before the first)"
            )
        return event

    def active_at(self, event: int) -> int:
        """Active (requested) bytes right after `event` (-1: before the first event)."""
        event = self.check_event(event)
        return self.baseline_bytes if event == -1 else int(self.active_after[event])

    def reserved_at(self, event: int) -> int:
        event = self.check_event(event)
        return self.reserved_start_bytes if event == -1 else int(self.reserved_after[event])

    def live_at(self, event: int) -> np.ndarray:
        """Rows of the allocation table alive right after `event` (-1: before the first)."""
        event = self.check_event(event)
        mask = (self.alloc_event <= event) & (self.free_event > event)
        return np.flatnonzero(mask)

    def live_at_peak(self) -> np.ndarray:
        return self.live_at(self.peak_event_index)

    def event_at_time(self, time_us: int) -> int:
        """Index of the last event at or before `time_us` (-1 if before the first)."""
        if self.n_events == 0 or self.time_us[0] < 0:
            raise ValueError("this trace has no timestamps (time_us)")
        times = self.monotonic_time_us
        return int(np.searchsorted(times, time_us, side="right")) - 1

    @cached_property
    def monotonic_time_us(self) -> np.ndarray:
        """time_us made non-decreasing (a clock step backwards would break searchsorted)."""
        return np.maximum.accumulate(self.time_us) if self.n_events else self.time_us

    def action_name(self, event: int) -> str:
        return self.snapshot.action_name(int(self.action[event]))

    def events_of(self, action: Action | str) -> np.ndarray:
        code = KNOWN_ACTIONS[action] if isinstance(action, str) else int(action)
        return np.flatnonzero(self.action == code)

    def _repr_html_(self) -> str:
        """Jupyter's display of this device: figures and timeline, static (see Snapshot)."""
        return _notebook_html("device_html", self)

    def headline(self) -> str:
        """One line of figures: what repr() and a notebook's text/plain show."""
        ooms = int(np.count_nonzero(self.action == Action.OOM))
        return (
            f"device {self.device}: {self.n_events:,} events, "
            f"peak active {format_bytes(self.peak_active_bytes)}, "
            f"peak reserved {format_bytes(self.peak_reserved_bytes)}"
            + (f", {ooms} OOM" if ooms else "")
        )

    def __repr__(self) -> str:
        # the dataclass repr printed every column (114 KB in a console, 186 KB of
        # text/plain stored in a notebook): one line is what a reader needs
        return f"<memlens DeviceTrace {self.headline()}>"


@dataclass
class Segments:
    """Final allocator state (all devices), segments and their blocks as columns."""

    device: np.ndarray  # int32
    address: np.ndarray  # uint64
    total_size: np.ndarray  # int64
    allocated_size: np.ndarray  # int64
    active_size: np.ndarray  # int64
    requested_size: np.ndarray  # int64
    stream: np.ndarray  # int32 index into Snapshot.streams
    is_large: np.ndarray  # bool ("large" segment_type)
    pool_id0: np.ndarray  # int64
    pool_id1: np.ndarray  # int64
    is_expandable: np.ndarray  # bool
    stack: np.ndarray  # int32
    block_offsets: np.ndarray  # int64 CSR into the block columns, len n_segments + 1
    block_address: np.ndarray  # uint64
    block_size: np.ndarray  # int64
    block_requested_size: np.ndarray  # int64
    block_state: np.ndarray  # uint8 (see actions.BLOCK_STATES)
    block_stack: np.ndarray  # int32

    def __len__(self) -> int:
        return len(self.address)

    def of_device(self, device: int) -> np.ndarray:
        return np.flatnonzero(self.device == device)

    @property
    def block_segment(self) -> np.ndarray:
        counts = np.diff(self.block_offsets)
        return np.repeat(np.arange(len(self.address), dtype=np.int64), counts)


@dataclass
class Snapshot:
    """A loaded snapshot: per-device traces plus shared tables."""

    source: str
    strings: list[str]
    frames: Frames
    stacks: Stacks
    streams: list[int]  # raw cudaStream_t values; index 0 is always the default stream 0
    segments: Segments
    annotations: Annotations
    allocator_settings: dict[str, Any]
    action_names: list[str]  # names of codes >= Action.FIRST_UNKNOWN, in code order
    traces: dict[int, DeviceTrace] = field(default_factory=dict)
    # memory pools the trace entries name (pool_id pairs; (0, 0) the default pool), in
    # order of first use; DeviceTrace.pool indexes it
    pools: list[tuple[int, int]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    format_notes: list[str] = field(default_factory=list)
    from_cache: bool = False
    # the column cache entry this snapshot was read from or written to (derived arrays)
    cache_key: str | None = field(default=None, compare=False, repr=False)

    def add_annotations(self, entries: list[dict[str, Any]]) -> None:
        """Append external_annotations entries (PyTorch's form: name, stage START/END,
        device, time_us), e.g. from another tool of the same run. Call it before any
        analysis: results already computed on this snapshot are not recomputed."""
        ids = {s: i for i, s in enumerate(self.strings)}

        def intern(name: Any) -> int:
            name = str(name)
            i = ids.get(name)
            if i is None:
                i = ids[name] = len(self.strings)
                self.strings.append(name)
            return i

        extra = annotation_columns(entries, intern)
        old = self.annotations
        self.annotations = Annotations(
            *(np.concatenate([getattr(old, f), getattr(extra, f)]) for f in
              ("name", "stage", "device", "time_us"))
        )  # fmt: skip

    @property
    def devices(self) -> list[int]:
        """Devices with trace entries or segments, in device order."""
        devs = {d for d, t in self.traces.items() if t.n_events}
        # a set, not np.unique: numpy's unique imports numpy.ma on first use (0.05-0.1 s
        # of `memlens view`'s start, for a few hundred segments)
        devs.update(self.segments.device.tolist())
        return sorted(devs)

    def device(self, device: int | None = None) -> DeviceTrace:
        """The trace of `device`; by default the device with the longest trace (as MemoryViz)."""
        if device is None:
            device = self.default_device
        if device not in self.traces:
            have = ", ".join(map(str, self.devices)) or "none"
            raise MemlensError(f"device {device} is not in this snapshot (devices: {have})")
        return self.traces[device]

    @property
    def default_device(self) -> int:
        if not self.traces:
            return 0
        return max(self.traces, key=lambda d: (self.traces[d].n_events, -d))

    def action_name(self, code: int) -> str:
        if code >= Action.FIRST_UNKNOWN:
            return self.action_names[code - Action.FIRST_UNKNOWN]
        return Action(code).name.lower()

    def string(self, sid: int) -> str:
        return "" if sid < 0 else self.strings[sid]

    def _repr_html_(self) -> str:
        """Jupyter's display of a snapshot: the headline figures and the timeline as
        static HTML + SVG (no script: it stays in a saved notebook, GitHub renders it)."""
        return _notebook_html("snapshot_html", self)

    def __repr__(self) -> str:
        """One line (the dataclass repr printed every column): the source, then the
        headline of the device with the longest trace, and how many other devices."""
        if not self.traces:
            return f"<memlens Snapshot {self.source!r}: no trace>"
        main = self.traces[self.default_device]
        others = len(self.traces) - 1
        more = f" (+{others} device{'s' if others > 1 else ''})" if others else ""
        return f"<memlens Snapshot {self.source!r}: {main.headline()}{more}>"

    def stack_frames(self, stack_id: int) -> list[dict[str, Any]]:
        """Frames of a stack as PyTorch-style dicts, innermost first."""
        f = self.frames
        return [
            {
                "filename": self.strings[f.filename[i]],
                "line": int(f.line[i]),
                "name": self.strings[f.name[i]],
            }
            for i in self.stacks.frames_of(stack_id)
        ]


# Display hook. IPython finds `_repr_html_` only on the object's class, but drawing is the
# views layer's job and snapshot must not depend on views. So the view is named by string,
# as the facade names its lazy attributes, and imported only when a notebook displays a
# snapshot: an extension point, not a dependency (declared in tests/test_architecture.py).
NOTEBOOK_VIEW = "memlens.views.notebook"


def _notebook_html(function: str, obj: Snapshot | DeviceTrace) -> str:
    import importlib

    html: str = getattr(importlib.import_module(NOTEBOOK_VIEW), function)(obj)
    return html

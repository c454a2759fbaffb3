"""What the viewer's API returns, as plain dicts (JSON-ready), independent of the web server:
each answer is a type of answers.py, built here in one place.

Every user-supplied string (frame names, filenames, metadata, annotation names) leaves
here as JSON data; the page inserts it with textContent only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict

import numpy as np

from memlens.analysis.oom import oom_entries
from memlens.analysis.sites import frame_label, site_of_allocations, user_frame_of_stacks
from memlens.errors import MemlensError
from memlens.snapshot.model import DeviceTrace, Snapshot
from memlens.views.layout import MAX_HEIGHT, MAX_WIDTH, DeviceLayout, View, time_range
from memlens.views.web import kept_answers
from memlens.views.web.answers import (
    AllocationAnswer,
    AnnotationsAnswer,
    ChartAnswer,
    CompareAnswer,
    ComparePeak,
    EventInfo,
    LiveAnswer,
    MetaAnswer,
    MetaDevice,
    MetaSnapshot,
    Span,
    StackFrame,
    StateAnswer,
    XRange,
)
from memlens.views.web.meta_peak import chart_peak
from memlens.views.web.stream_lanes import lane_answers, stream_lane_count

# What only the page's later requests use (summary, stages, the details cards, compare,
# search) is imported where it is used: `memlens view` imports this module before it
# serves, and each import here is start-up time before the first paint (issue 37).

KIND_NAMES: tuple[Literal["python", "cpp", "noise"], ...] = ("python", "cpp", "noise")
MAX_ANNOTATIONS = 200_000
MAX_OOM_MARKERS = 100
# the page draws allocations down to this fraction of a pixel as thin stripes (within the
# layout's cell budget): at full zoom on a large model every tensor is under a pixel
PAGE_MIN_PX = 1 / 16
# how long warm() leaves the CPU to the first viewport (nobody may open the page)
FIRST_VIEW_WAIT_S = 10.0
# ... and then to its drawing: until the page asks for anything more (its overview, summary
# and stage strip come once its first viewport is drawn), at most this long
DRAWING_WAIT_S = 2.0


if TYPE_CHECKING:
    from typing_extensions import NotRequired, Unpack

    from memlens.analysis.results import DeviceSummary


class Window(TypedDict):
    """A viewport's size and x range (events, or times when t0 and t1 are given), as the
    chart endpoints take it; a missing bound is the trace's own."""

    width: int
    height: int
    e0: NotRequired[float | None]
    e1: NotRequired[float | None]
    t0: NotRequired[float | None]
    t1: NotRequired[float | None]


class ViewOptions(Window):
    """view()'s parameters besides the snapshot and the device."""

    ymax: NotRequired[int | None]
    ymin: NotRequired[int | None]
    detail: NotRequired[bool]
    min_px: NotRequired[float]
    q: NotRequired[str | None]
    split: NotRequired[Literal["stream"] | None]


class ViewerData:
    """The snapshots being viewed and their per-device layout indexes."""

    def __init__(self, snapshots: list[Snapshot], names: list[str] | None = None) -> None:
        if not snapshots:
            raise MemlensError("nothing to view")
        self.snapshots = snapshots
        self.names = names or [s.source for s in snapshots]
        self._layouts: dict[tuple[int, int], DeviceLayout] = {}
        self._lock = threading.Lock()
        self._annotations: dict[tuple[int, int], AnnotationsAnswer] = {}
        self._meta: MetaAnswer | None = None
        self._summaries: dict[tuple[int, int], DeviceSummary] = {}
        self._meta_lock = threading.Lock()  # computed once, by whoever asks first
        self._ann_lock = threading.Lock()
        self._sites_lock = threading.Lock()
        self._first_view = threading.Event()
        self._drawn = threading.Event()  # the page asked for more after its first viewport
        self._deferred = False  # warm() will build the slow indexes, after the first view
        self._keeper = kept_answers.Keeper()  # answers kept for the next start

    # ---- lookups -------------------------------------------------------------------------
    def snap(self, s: int) -> Snapshot:
        if not 0 <= s < len(self.snapshots):
            raise MemlensError(f"no snapshot {s}")
        return self.snapshots[s]

    def dev(self, s: int, device: int) -> DeviceTrace:
        return self.snap(s).device(device)

    def layout(self, s: int, device: int) -> DeviceLayout:
        key = (s, device)
        with self._lock:
            lay = self._layouts.get(key)
            if lay is None:
                lay = self._layouts[key] = DeviceLayout(self.dev(s, device))
                if self._deferred:
                    lay.defer_checkpoints()
        return lay

    def defer_indexes(self) -> None:
        """Leave the slow indexes (the live-row checkpoints) to warm(): until it has built
        them, viewports take the route without them (same answer). For `memlens view`."""
        with self._lock:
            self._deferred = True
            for lay in self._layouts.values():
                lay.defer_checkpoints()

    def warm(self, after_first_view: Sequence[Callable[[], None]] = ()) -> None:
        """Build what the first paint needs (a background thread after startup): the device
        list and the kept layout indexes of the device shown first; after the first
        viewport and its drawing when defer_indexes() was called, `after_first_view` (a cold start's cache
        writes: they would take the CPU the first paint needs) and then the indexes of
        every device, the one shown first first; last, the answers to keep for the next
        start (kept_answers.py). Summaries and stage spans are left to the page, which asks
        after its first paint."""
        self.meta()
        keys = [(s, d) for s, snap in enumerate(self.snapshots) for d in snap.traces]
        keys.sort(key=lambda k: k[1] != self.snapshots[k[0]].default_device)
        # the kept indexes of the first device shown, if any, and its call sites' frames,
        # while the page loads; after the first viewport when it is likely kept, as its
        # answer: the page's requests then have the CPU and the GIL to themselves
        answered = self._deferred and any(
            kept_answers.has_views(self.snapshots[s], d) for s, d in keys[:1]
        )
        if keys and not answered:
            self._first_layout(*keys[0])
        # building the indexes takes the CPU (and the GIL) the first viewport needs: 1.2 s
        # instead of 0.3 for it at 4M events on a cold start; start once it is out, and
        # drawn: the page's JSON parsing and canvas work want the same CPU on a small
        # machine (a cold start's cache writes most of all)
        if self._deferred and self._first_view.wait(FIRST_VIEW_WAIT_S):
            self._drawn.wait(DRAWING_WAIT_S)
        if keys and answered:
            self._first_layout(*keys[0])
        for job in after_first_view:
            job()
        for s, d in keys:
            self.layout(s, d).warm()
        self._keeper.flush()  # the answers to keep, now that the cache entry is written

    def _first_layout(self, s: int, device: int) -> None:
        self.layout(s, device).restore()
        self._sites(self.snapshots[s])

    def _sites(self, snap: Snapshot) -> None:
        """Each stack's call-site frame (analysis.sites, memoized on the snapshot): warm()
        finds them while the page loads, and a viewport asked for meanwhile waits for that
        rather than finding them a second time (0.1-0.15 s at 4M events, with the import of
        numpy.ma that numpy's unique makes on first use)."""
        with self._sites_lock:
            user_frame_of_stacks(snap)

    # ---- /api/meta -------------------------------------------------------------------------
    def meta_ready(self) -> bool:
        """Whether meta() answers without computing (or waiting for) anything."""
        return self._meta is not None

    def meta(self) -> MetaAnswer:
        with self._meta_lock:
            if self._meta is None:
                self._meta = self._build_meta()
        return self._meta

    def _build_meta(self) -> MetaAnswer:
        out: list[MetaSnapshot] = []
        for s, snap in enumerate(self.snapshots):
            devices = [self._meta_device(s, snap, d) for d in snap.devices if d in snap.traces]
            out.append(
                {
                    "index": s,
                    "name": self.names[s],
                    "default_device": snap.default_device,
                    "devices": devices,
                    "warnings": list(snap.warnings),
                }
            )
        return {"snapshots": out}

    def _meta_device(self, s: int, snap: Snapshot, d: int) -> MetaDevice:
        """A device's part of the meta answer: kept by an earlier start, else computed (and
        kept for the next)."""
        key = f"meta-d{d}"
        body = kept_answers.load(snap, key)
        if body is not None:
            kept: MetaDevice = json.loads(body)
            return kept
        dev = snap.traces[d]
        tr = time_range(dev)
        out: MetaDevice = {
            "device": d,
            "n_events": dev.n_events,
            "n_allocations": dev.n_allocations,
            "time_range": list(tr) if tr else None,
            # what the chart needs; the header's figures come from /summary
            "peak": chart_peak(self.layout(s, d), tr is not None),
            "stream_lanes": stream_lane_count(dev),
            # marked on the chart (the first MAX_OOM_MARKERS)
            "ooms": oom_entries(dev, MAX_OOM_MARKERS),
        }
        self._keeper.put(snap, key, kept_answers.json_bytes(out))
        return out

    def _lane_count(self, s: int, device: int) -> int:
        """The meta answer's stream_lanes of a device (0: its trace is not split)."""
        devices = self.meta()["snapshots"][s]["devices"]
        return next((d["stream_lanes"] for d in devices if d["device"] == device), 0)

    # ---- /api/d/{device}/summary ------------------------------------------------------------
    def summary(self, s: int, device: int) -> DeviceSummary:
        """`memlens summary` figures of one device (asked for after the first paint)."""
        self._drawn.set()
        key = (s, device)
        with self._meta_lock:
            if key not in self._summaries:
                from memlens.analysis.summary import device_summary

                self._summaries[key] = device_summary(self.dev(s, device), top=10)
        return self._summaries[key]

    # ---- /api/d/{device}/view ----------------------------------------------------------------
    def view(
        self,
        s: int,
        device: int,
        *,
        ymax: int | None = None,
        ymin: int | None = None,
        detail: bool = True,
        min_px: float = PAGE_MIN_PX,
        q: str | None = None,
        split: Literal["stream"] | None = None,
        **window: Unpack[Window],
    ) -> ChartAnswer:
        """The allocations chart; split="stream": a lane per stream (ymin, ymax ignored),
        where the trace has several (stream_lanes.py)."""
        if not 0 < min_px <= 1:
            raise MemlensError("min_px must be in (0, 1]")
        lay = self.layout(s, device)
        dev = lay.dev
        width, height, bounds, x = self._columns(lay, window)
        ymin = int(ymin or 0)
        if ymax is not None and not ymax > ymin >= 0:
            raise MemlensError("need 0 <= ymin < ymax")
        lanes = lay.stream_lanes if split and detail and self._lane_count(s, device) else None
        v = lay.view(
            bounds, height, ymax=ymax, ymin=ymin, detail=detail, min_px=min_px, lanes=lanes
        )
        ymin = 0 if lanes is not None else ymin
        rows = v.band_rows
        self._sites(dev.snapshot)
        uniq, inv = np.unique(site_of_allocations(dev, rows), return_inverse=True)
        out = self._chart(
            "allocations",
            v,
            dev,
            bounds,
            x,
            width,
            height,
            ymin,
            size=dev.alloc_size[rows],
            group=inv,
            groups=[frame_label(dev.snapshot, int(u)) for u in uniq],
            group_keys=uniq,  # frame ids
        )
        out["bands"]["flags"] = dev.alloc_flags[rows].tolist()
        if lanes is not None:
            out["lanes"] = lane_answers(v, dev.snapshot.streams)
        if q:  # the find box: which bands match, and for an address where it was
            from memlens.views.web.search import address_hits, band_matches, parse_query

            query = parse_query(q)
            out["bands"]["match"] = band_matches(dev, rows, query).astype(np.uint8).tolist()
            if isinstance(query, int):
                out["address_hits"] = address_hits(dev, query)
        self._first_view.set()
        return out

    def view_json(self, s: int, device: int, **options: Unpack[ViewOptions]) -> bytes:
        """view()'s answer as the API sends it; a whole-trace viewport (what a page asks for
        first) is kept for the next start and served from there (kept_answers.py)."""
        e0, e1 = options.get("e0"), options.get("e1")
        whole = (
            not options.get("q")
            and not options.get("ymin")
            and options.get("ymax") is None
            and options.get("min_px", PAGE_MIN_PX) == PAGE_MIN_PX
            and options.get("t0") is None
            and options.get("t1") is None
            and (e0 is None or str(e0) == "0.0")  # (-0.0 is echoed as such)
            and e1 in (None, float(max(self.dev(s, device).n_events, 1)))
        )
        key, snap = None, self.snap(s)
        if self._first_view.is_set():  # a later viewport: the first one is drawn
            self._drawn.set()
        if whole:
            width = int(min(max(options["width"], 1), MAX_WIDTH))
            height = int(min(max(options["height"], 1), MAX_HEIGHT))
            split, detail = options.get("split") or "stack", options.get("detail", True)
            key = f"view-d{device}-{width}x{height}-{split}-{int(detail)}"
            body = kept_answers.load(snap, key)
            if body is not None:
                self._first_view.set()
                return body
        body = kept_answers.json_bytes(self.view(s, device, **options))
        if key is not None:
            self._keeper.put(snap, key, body)
        return body

    @staticmethod
    def _columns(lay: DeviceLayout, window: Window) -> tuple[int, int, np.ndarray, XRange]:
        """A viewport's width and height (clamped), its column bounds on the event or the
        time axis, and its "x" echo."""
        width = int(min(max(window["width"], 1), MAX_WIDTH))
        height = int(min(max(window["height"], 1), MAX_HEIGHT))
        e0, e1 = window.get("e0"), window.get("e1")
        t0, t1 = window.get("t0"), window.get("t1")
        dev = lay.dev
        if t0 is not None and t1 is not None:
            if time_range(dev) is None:
                raise MemlensError("this trace has no timestamps; use the event axis")
            if not t1 > t0:
                raise MemlensError("t1 must be greater than t0")
            x: XRange = {"mode": "time", "t0": t0, "t1": t1}
            return width, height, lay.time_bounds(t0, t1, width), x
        e0 = 0.0 if e0 is None else float(e0)
        e1 = float(max(dev.n_events, 1)) if e1 is None else float(e1)
        if not e1 > e0:
            raise MemlensError("e1 must be greater than e0")
        x = {"mode": "event", "e0": e0, "e1": e1}
        return width, height, lay.event_bounds(e0, e1, width), x

    @staticmethod
    def _chart(
        kind: Literal["allocations", "segments"],
        v: View,
        dev: DeviceTrace,
        bounds: np.ndarray,
        x: XRange,
        width: int,
        height: int,
        ymin: int,
        *,
        size: np.ndarray,
        group: np.ndarray,
        groups: list[str],
        group_keys: np.ndarray,
    ) -> ChartAnswer:
        """A chart's answer (both timelines): the View's columns and bands, each band's size
        and group (its colour and label), the x range asked for, and the time of each column
        boundary (lets the page switch axes keeping the range)."""
        out: ChartAnswer = {
            "kind": kind,
            "x": x,
            "width": width,
            "height": height,
            "bounds": v.bounds.tolist(),
            "sample": v.sample.tolist(),
            "active": v.active.tolist(),
            "reserved": v.reserved.tolist(),
            "ymin": ymin,
            "ymax": int(v.ymax),
            "bytes_per_px": float(v.bytes_per_px),
            "bands": {
                "row": v.band_rows.tolist(),
                "c0": v.band_c0.tolist(),
                "c1": v.band_c1.tolist(),
                "run_start": v.run_start.tolist(),  # see View.offset_runs
                "run_col": v.run_col.tolist(),
                "run_off": v.run_off.tolist(),
                "size": size.tolist(),
                "group": group.tolist(),
            },
            "small": {
                "offset": v.small_offset.tolist(),
                "bytes": v.small_bytes.tolist(),
                "count": v.small_count.tolist(),
                "max_size": int(v.small_max),
                "min_size": int(v.small_min),
                "cut_count": v.cut_count.tolist(),
                "cut_bytes": v.cut_bytes.tolist(),
            },
            "groups": groups,
            "group_keys": group_keys.tolist(),  # stable colour keys across views
        }
        if time_range(dev) is not None:
            out["times"] = dev.monotonic_time_us[np.clip(bounds, 0, dev.n_events - 1)].tolist()
        return out

    # ---- /api/d/{device}/segments --------------------------------------------------------------
    def segments(self, s: int, device: int, **window: Unpack[Window]) -> ChartAnswer:
        """The Active Cached Segment Timeline: the chart's shape, a band per segment, its
        stream as the group (colour and label), its address in bands.address."""
        lay = self.layout(s, device)
        width, height, bounds, x = self._columns(lay, window)
        from memlens.views.layout.segments import segment_view

        v, segs = segment_view(lay, bounds, height)
        rows = v.band_rows
        streams = self.snap(s).streams
        uniq, inv = np.unique(segs.stream[rows], return_inverse=True)
        out = self._chart(
            "segments",
            v,
            lay.dev,
            bounds,
            x,
            width,
            height,
            0,
            size=segs.size[rows],
            group=inv,
            groups=[
                f"segment on stream 0x{int(streams[u]) if 0 <= u < len(streams) else int(u):x}"
                for u in uniq.tolist()
            ],
            group_keys=uniq,  # stream indices
        )
        out["bands"]["address"] = [f"0x{int(a):x}" for a in segs.addr[rows].tolist()]
        return out

    # ---- /api/d/{device}/alloc/{row} -----------------------------------------------------------
    def allocation(self, s: int, device: int, row: int) -> AllocationAnswer:
        dev = self.dev(s, device)
        if not 0 <= row < dev.n_allocations:
            raise MemlensError(f"no allocation row {row}")
        snap = dev.snapshot
        from memlens.analysis.allocations import flag_names, life_events
        from memlens.analysis.allocator_state import allocation_pool

        flags = flag_names(dev, row)
        ae, fr, fe = life_events(dev, row)
        # context fields live on the alloc event; a pre-existing allocation only has its free
        ctx_event = ae if ae >= 0 else (fe if fe < dev.n_events else -1)
        addr = int(dev.alloc_addr[row])
        sid = int(dev.alloc_stack[row])

        def event_info(e: int) -> EventInfo | None:
            if e < 0 or e >= dev.n_events:
                return None
            t = int(dev.time_us[e])
            return {"event": e, "time_us": t if t >= 0 else None}

        def string_at(col: np.ndarray) -> str | None:
            if ctx_event < 0:
                return None
            sidx = int(col[ctx_event])
            return snap.string(sidx) if sidx >= 0 else None

        free_stack = None
        if fr >= 0 and int(dev.stack[fr]) not in (-1, sid):
            free_stack = self._frames(snap, int(dev.stack[fr]))
        return {
            "row": row,
            "size": int(dev.alloc_size[row]),
            "address": f"0x{addr:x}",
            "version": int(dev.alloc_version[row]),
            "alloc": event_info(ae),
            "free_requested": event_info(fr),
            "free": event_info(fe),
            "stream": f"0x{int(snap.streams[int(dev.alloc_stream[row])]):x}",
            "pool": allocation_pool(dev, row),
            "compile_context": string_at(dev.compile_context),
            "user_metadata": string_at(dev.user_metadata),
            "forward_frames": string_at(dev.forward_stack),
            "flags": flags,
            "stack_from_free": "preexisting" in flags and "ghost" not in flags,
            "frames": self._frames(snap, sid),
            "free_frames": free_stack,
        }

    @staticmethod
    def _frames(snap: Snapshot, sid: int) -> list[StackFrame]:
        f = snap.frames
        return [
            {
                "filename": snap.strings[f.filename[i]],
                "line": int(f.line[i]),
                "name": snap.strings[f.name[i]],
                "kind": KIND_NAMES[int(f.kind[i])],
            }
            for i in snap.stacks.frames_of(sid).tolist()
        ]

    # ---- /api/d/{device}/live ----------------------------------------------------------------
    def live(self, s: int, device: int, event: int, python_only: bool = True) -> LiveAnswer:
        dev = self.dev(s, device)
        event = int(min(max(event, -1), dev.n_events - 1))
        from memlens.analysis.tree import live_tree

        tree = live_tree(dev, event, python_only=python_only, hide_internal=python_only)
        t = int(dev.time_us[event]) if event >= 0 and dev.time_us[event] >= 0 else None
        return {
            "event": event,
            "time_us": t,
            "active": dev.active_at(event),
            "reserved": dev.reserved_at(event),
            "tree": tree.to_dict(dev.snapshot),
        }

    # ---- /api/d/{device}/state -------------------------------------------------------------------
    def state(self, s: int, device: int, event: int) -> StateAnswer:
        """Segments and blocks right after `event` (clamped to the trace; -1: before it)."""
        dev = self.dev(s, device)
        from memlens.views.web.allocator_view import allocator_state

        return allocator_state(dev, int(min(max(event, -1), dev.n_events - 1)))

    # ---- /api/d/{device}/annotations ---------------------------------------------------------------
    def annotations(self, s: int, device: int) -> AnnotationsAnswer:
        self._drawn.set()  # (asked for after the first paint)
        key = (s, device)
        with self._ann_lock:
            if key not in self._annotations:
                self._annotations[key] = self._build_annotations(self.dev(s, device))
        return self._annotations[key]

    @staticmethod
    def _build_annotations(dev: DeviceTrace) -> AnnotationsAnswer:
        """The stages of `memlens stages` (analysis.stages.stage_intervals: the same pairing,
        nesting and events), as time spans for the stage strip."""
        from memlens.analysis.stages import stage_intervals

        stages = stage_intervals(dev)
        span = time_range(dev)
        if not stages or span is None:  # (stages exist only on a timed trace)
            return {"spans": [], "truncated": False}
        t_first, t_last = span
        truncated = len(stages) > MAX_ANNOTATIONS
        # the strip's row: one below the stage's parent (stage_intervals nests annotated and
        # inferred stages in one tree, in pre-order), lower still while a span drawn on that
        # row has not ended (ranges that cross share no row)
        out: list[Span] = []
        row_of: list[int] = []
        row_end: list[int] = []
        for st in stages[:MAX_ANNOTATIONS]:
            s0, s1 = st["start_time_us"], st["end_time_us"]  # never both None
            # a stage open at an edge of the ring buffer's window is drawn to that edge
            t0 = s0 if s0 is not None else t_first if s1 is None else min(t_first, s1)
            t1 = s1 if s1 is not None else max(t_last, t0)
            row = 0 if st["parent"] is None else row_of[st["parent"]] + 1
            while row < len(row_end) and row_end[row] > t0:
                row += 1
            row_end[len(row_end) : row + 1] = [t0] * (row + 1 - len(row_end))
            row_end[row] = t1
            row_of.append(row)
            out.append(
                {
                    "name": st["name"],
                    "t0": t0,
                    "t1": t1,
                    "e0": st["first_event"],  # events e0..e1-1 are inside
                    "e1": st["last_event"] + 1,
                    "depth": row,
                    "inferred": st["inferred"],  # read from the trace, not annotated
                }
            )
        return {"spans": out, "truncated": truncated}

    # ---- /api/compare ---------------------------------------------------------------------------
    def compare(self, devices: list[int | None], limit: int = 50) -> CompareAnswer:
        """analysis.diff of the two snapshots (sites at each peak) and their peaks."""
        if len(self.snapshots) < 2:
            raise MemlensError("compare needs two snapshots")
        pair = [
            snap.device(d if d is not None else snap.default_device)
            for snap, d in zip(self.snapshots[:2], devices, strict=False)
        ]
        from memlens.analysis.diff import diff

        result = diff(pair[0], pair[1], top=limit, stages=False)
        peaks: list[ComparePeak] = [
            {
                "device": dev.device,
                "peak_bytes": dev.peak_active_bytes,
                "peak_event": dev.peak_event_index,
                "peak_reserved_bytes": dev.peak_reserved_bytes,
            }
            for dev in pair
        ]
        return {
            "names": self.names[:2],
            "peaks": peaks,
            "sites": result["sites"],
            "sites_total": result["sites_total"],
            "figures": result["figures"],
        }

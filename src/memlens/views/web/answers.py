"""The viewer API's answers: one declared type per endpoint (server.py routes them).

These are the page's contract. static/js/types.js declares the same objects as JSDoc
`@typedef`s, the page's modules are type-checked against them (`tsc --checkJs`, run by
scripts/check.sh), and tests/view/test_view_answers.py checks the two lists of keys agree.
data.py builds each answer in one place. Optional keys live in a `total=False` base
(Python 3.10 has no NotRequired), as in analysis/results.py.

    GET /api/meta                   MetaAnswer
    GET /api/d/{device}/view        ChartAnswer (kind "allocations")
    GET /api/d/{device}/segments    ChartAnswer (kind "segments")
    GET /api/d/{device}/alloc/{row} AllocationAnswer
    GET /api/d/{device}/live        LiveAnswer
    GET /api/d/{device}/state       StateAnswer
    GET /api/d/{device}/summary     analysis.results.DeviceSummary (`memlens summary`'s)
    GET /api/d/{device}/annotations AnnotationsAnswer
    GET /api/d/{device}/pools       PoolsAnswer
    GET /api/compare                CompareAnswer
    any, on an error                ErrorAnswer (HTTP 400: the user's; 500: a bug)
"""

from __future__ import annotations

from typing import Literal, TypedDict

from memlens.analysis.results import (
    Block,
    Figure,
    OomEntry,
    SegmentInfo,
    SiteChange,
    StateSummary,
    TreeNode,
)


class ErrorAnswer(TypedDict):
    error: str


# --- /api/meta -------------------------------------------------------------------------------


class MetaPeak(TypedDict):
    peak_event_index: int
    peak_time_us: int | None
    peak_active_bytes: int
    peak_reserved_bytes: int


class MetaDevice(TypedDict):
    device: int
    n_events: int
    n_allocations: int
    time_range: list[int] | None  # [first, last] µs; None: no timestamps
    peak: MetaPeak  # what the chart needs; the header's figures come from /summary
    stream_lanes: int  # lanes split=stream draws: 0 with one stream (or too many)
    ooms: list[OomEntry]  # marked on the chart (the first MAX_OOM_MARKERS)


class MetaSnapshot(TypedDict):
    index: int
    name: str
    default_device: int
    devices: list[MetaDevice]  # those with a trace
    warnings: list[str]


class MetaAnswer(TypedDict):
    snapshots: list[MetaSnapshot]


# --- /view and /segments: a chart --------------------------------------------------------------


class XRange(TypedDict, total=False):
    """The range asked for, echoed: e0/e1 on the event axis, t0/t1 on the time axis."""

    mode: Literal["event", "time"]
    e0: float
    e1: float
    t0: float
    t1: float


class _BandsExtras(TypedDict, total=False):
    flags: list[int]  # allocations: snapshot.model's flag bits per band
    match: list[int]  # allocations, with q: 1 where the band matches the find box
    address: list[str]  # segments: each segment's address (0x...)


class Bands(_BandsExtras):
    """The bands drawn one by one, in stacking order; band k's offset runs are
    run_start[k]:run_start[k+1] (run i from column run_col[i] at offset run_off[i])."""

    row: list[int]  # allocation row (segments: segment index)
    c0: list[int]  # first column
    c1: list[int]  # one past the last
    run_start: list[int]
    run_col: list[int]
    run_off: list[int]
    size: list[int]
    group: list[int]  # index into the chart's groups / group_keys


class Small(TypedDict):
    """The aggregate band of what is drawn too small, per column, and what was cut."""

    offset: list[int]
    bytes: list[int]
    count: list[int]
    max_size: int
    min_size: int
    cut_count: list[int]
    cut_bytes: list[int]


class AddressHit(TypedDict):
    row: int
    address: str
    size: int
    alloc_event: int
    free_event: int


class AddressHits(TypedDict):
    total: int
    hits: list[AddressHit]  # the first MAX_HITS


class Lane(TypedDict):
    """One stream's lane (streams drawn apart): its bottom and height on the memory axis,
    and its own aggregate band (`small`, the chart's shape, offsets absolute)."""

    stream: str  # the stream's handle, hex
    base: int
    top: int  # its most live bytes among the columns
    small: Small


class _ChartExtras(TypedDict, total=False):
    times: list[int]  # each column boundary's time (µs), on a timed trace
    address_hits: AddressHits  # allocations: the find box held an address
    # allocations with split=stream on a trace of several streams: the bands stacked lane
    # by lane (their run_off absolute), `small` then the lanes' sums per column
    lanes: list[Lane]


class ChartAnswer(_ChartExtras):
    """One viewport, `width` columns by `height` pixels. A band's colour and label is its
    group: the call site of an allocation, the stream of a segment."""

    kind: Literal["allocations", "segments"]
    x: XRange
    width: int
    height: int
    bounds: list[int]  # width + 1 event indices: column c covers [bounds[c], bounds[c+1])
    sample: list[int]  # the event whose state each column shows (-1: before all)
    active: list[int]
    reserved: list[int]
    ymin: int
    ymax: int
    bytes_per_px: float
    bands: Bands
    small: Small
    groups: list[str]  # labels
    group_keys: list[int]  # stable colour keys across views (frame ids; stream indices)


# --- /alloc/{row} ----------------------------------------------------------------------------


class EventInfo(TypedDict):
    event: int
    time_us: int | None


class StackFrame(TypedDict):
    filename: str
    line: int
    name: str
    kind: Literal["python", "cpp", "noise"]


class AllocationAnswer(TypedDict):
    row: int
    size: int
    address: str
    version: int
    alloc: EventInfo | None  # None: made before the trace
    free_requested: EventInfo | None
    free: EventInfo | None  # None: alive at the end
    stream: str
    pool: list[int] | None  # memory pool id pair (allocator_state.allocation_pool); None: unknown
    compile_context: str | None
    user_metadata: str | None
    forward_frames: str | None
    flags: list[str]
    stack_from_free: bool  # the alloc was not recorded: the stack is the free's
    frames: list[StackFrame]
    free_frames: list[StackFrame] | None  # when the free's stack differs


# --- /live -----------------------------------------------------------------------------------


class LiveAnswer(TypedDict):
    event: int
    time_us: int | None
    active: int
    reserved: int
    tree: TreeNode


# --- /state ----------------------------------------------------------------------------------


class DrawnBlock(Block):
    offset: int  # from the segment's start


class DrawnSegment(SegmentInfo):
    blocks: list[DrawnBlock]  # the first ones, MAX_BLOCKS over the card
    blocks_total: int


class _StateExtras(TypedDict, total=False):
    inconsistencies: int  # only when > 0


class StateAnswer(StateSummary, _StateExtras):
    """analysis.allocator_state.state_at, cut to what the card draws."""

    rounding_waste_bytes: int
    segments: list[DrawnSegment]  # by address, the first MAX_SEGMENTS
    segments_shown: int
    blocks_shown: int
    settings: list[list[str]]  # [name, value] text pairs


# --- /annotations ----------------------------------------------------------------------------


class Span(TypedDict):
    name: str
    t0: int
    t1: int
    e0: int  # events e0..e1-1 are inside
    e1: int
    depth: int  # the strip's row
    inferred: bool  # read from the trace (analysis.inferred_steps), not annotated


class AnnotationsAnswer(TypedDict):
    spans: list[Span]
    truncated: bool


# --- /pools -----------------------------------------------------------------------------------


class PoolEnvelope(TypedDict):
    """One memory pool (None: unknown) over the trace: `envelope` its most live bytes in
    each column of events; at the peak its bytes, count and share of the live bytes."""

    pool: list[int] | None
    peak_bytes: int
    peak_count: int
    share: float
    max_bytes: int
    envelope: list[int]


class StreamEnvelope(TypedDict):
    """PoolEnvelope's figures for the allocations made on one stream (its handle in hex)."""

    stream: str
    peak_bytes: int
    peak_count: int
    share: float
    max_bytes: int
    envelope: list[int]


class SizeEnvelope(TypedDict):
    """Reserved bytes in segments of one size class (segment_sizes.CLASSES) over the trace."""

    size_class: str
    max_bytes: int
    envelope: list[int]


class PoolsAnswer(TypedDict):
    n_events: int
    peak_event: int
    pools: list[PoolEnvelope]
    streams: list[StreamEnvelope]  # empty for a trace on one stream
    segment_sizes: list[SizeEnvelope]  # empty when one size class holds all


# --- /compare ---------------------------------------------------------------------------------


class ComparePeak(TypedDict):
    device: int
    peak_bytes: int
    peak_event: int
    peak_reserved_bytes: int


class CompareAnswer(TypedDict):
    """analysis.diff of the two snapshots at their peaks: `sites` are its SiteChanges,
    `sites_total` how many there were in all."""

    names: list[str]
    peaks: list[ComparePeak]
    sites: list[SiteChange]
    sites_total: int
    figures: list[Figure]

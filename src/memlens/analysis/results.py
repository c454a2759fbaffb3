"""The result types of every analysis: what `memlens <command> --json` prints and what
`memlens.analysis.*` returns, one TypedDict per JSON object of docs/json-schema.md.

One module rather than a type beside each analysis because the shapes are shared: Site,
Point, Allocation and TreeNode appear in most results, and a command's JSON often
wraps an analysis result (`stages` adds "repeated", `check` and `oom` a list of
devices). Here the whole contract reads top to bottom like the doc, and
tests/analysis/test_json_schema.py checks the two against each other field by field.
It imports nothing heavy, so type checkers and that test load it without numpy.

The dicts stay plain dicts at run time (same JSON, no conversion). Keys that are only
sometimes present live in a `total=False` base (Python 3.10 has no NotRequired).
"""

from __future__ import annotations

from typing import Literal, TypedDict

# --- shared objects ----------------------------------------------------------------------


class Frame(TypedDict):
    filename: str | None
    line: int | None
    name: str | None


class Site(Frame):
    """Call site: its first user frame (all None for "<no stack recorded>")."""

    site: str
    bytes: int
    count: int
    via: str | None  # the glue frame the site called through (einops, ...), if any


class NetSite(Site):
    """bytes = added_bytes - removed_bytes; count = allocations added."""

    added_bytes: int
    removed_bytes: int


class Point(TypedDict):
    """Where in the trace: right after `event` (-1: before the first event)."""

    event: int
    time_us: int | None
    action: str | None
    active_bytes: int
    reserved_bytes: int


class Allocation(TypedDict):
    row: int
    address: str
    version: int
    bytes: int
    alloc_event: int
    free_requested_event: int
    free_event: int | None
    preexisting: bool
    ghost: bool
    stream: int | None
    site: str


class TreeFrame(TypedDict):
    filename: str
    line: int
    name: str
    kind: Literal["python", "cpp", "noise"]


class _TreeNodeFrame(TypedDict, total=False):
    frame: TreeFrame  # absent for the root and for the synthetic nodes


class TreeNode(_TreeNodeFrame):
    label: str
    bytes: int
    count: int
    children: list[TreeNode]


class Curve(TypedDict):
    """Per group (category, rule) bytes at the sampled events."""

    event: list[int]
    bytes: dict[str, list[int]]


# --- peak / at -----------------------------------------------------------------------------


class LiveSet(Point):
    device: int
    live_count: int
    by_site: list[Site]
    tree: TreeNode | None
    largest: list[Allocation]


class PeakResult(LiveSet):
    peak_active_bytes: int
    peak_reserved_bytes: int
    peak_reserved_event: int


class AllocationLiveSet(LiveSet):
    when: str  # "alloc" | "free"
    allocation: Allocation


# --- stages --------------------------------------------------------------------------------


class StageInterval(TypedDict):
    index: int
    name: str
    base_name: str
    occurrence: int
    depth: int
    parent: int | None
    start_time_us: int | None
    end_time_us: int | None
    open_start: bool
    open_end: bool
    crosses: bool  # overlaps another stage without either holding the other
    inferred: bool  # read from the trace (analysis.inferred_steps), not an annotation
    start_event: int
    first_event: int
    last_event: int


class StageRow(StageInterval):
    active_start_bytes: int
    active_end_bytes: int
    peak_bytes: int
    peak_event: int
    reserved_start_bytes: int
    reserved_end_bytes: int
    peak_reserved_bytes: int
    allocated_bytes: int
    allocated_count: int
    freed_bytes: int
    freed_count: int
    net_bytes: int
    grew: list[NetSite]
    shrank: list[NetSite]


class StageTable(TypedDict):
    device: int
    has_time: bool
    annotations: int
    notes: list[str]
    stages: list[StageRow]


class StepRow(TypedDict):
    name: str
    occurrence: int
    first_event: int
    last_event: int
    peak_bytes: int
    active_start_bytes: int
    active_end_bytes: int
    net_bytes: int
    allocated_bytes: int
    delta_peak_bytes: int | None
    delta_end_bytes: int | None


class RepeatedStage(TypedDict):
    base_name: str
    count: int
    steps: list[StepRow]
    peak_min_bytes: int
    peak_max_bytes: int
    end_growth_bytes: int


class StepComparison(TypedDict):
    device: int
    groups: list[RepeatedStage]


class StagesOutput(StageTable):
    """`memlens stages --json`: the stage table plus compare_steps' groups."""

    repeated: list[RepeatedStage]


# --- categories / rules ----------------------------------------------------------------------


class GroupRow(TypedDict):
    """One group of group_summary (a category or a rule)."""

    name: str
    bytes: int
    count: int
    peak_bytes: int
    peak_event: int
    allocated_bytes: int
    allocated_count: int
    top_sites: list[Site]


class ContextRow(TypedDict):
    context: str
    bytes: int
    count: int
    allocated_bytes: int
    allocated_count: int


class CompileContexts(TypedDict):
    device: int
    event: int
    has_context: bool
    contexts: list[ContextRow]


class CategoriesResult(Point):
    device: int
    categories: list[GroupRow]
    curve: Curve


class CategoriesOutput(CategoriesResult):
    """`memlens categories --json`: categories plus by_compile_context."""

    compile_contexts: CompileContexts


class RuleRow(GroupRow):
    pattern: str | None
    description: str


class RulesResult(Point):
    device: int
    rules: list[RuleRow]
    curve: Curve


# --- diff --------------------------------------------------------------------------------------


class DiffSide(TypedDict):
    source: str
    device: int


class Figure(TypedDict):
    name: str
    a: int
    b: int
    change: int
    change_pct: float | None


Status = Literal["both", "only_a", "only_b"]


class SiteChange(Frame):
    site: str
    a_bytes: int
    b_bytes: int
    change: int
    a_count: int
    b_count: int
    status: Status
    key: str  # machine-independent: function (path in its package/project:line)


class StageChange(TypedDict):
    name: str
    occurrence: int
    a_peak_bytes: int | None
    b_peak_bytes: int | None
    peak_change: int | None
    a_net_bytes: int | None
    b_net_bytes: int | None
    net_change: int | None
    status: Status


class DiffResult(TypedDict):
    a: DiffSide
    b: DiffSide
    figures: list[Figure]
    sites: list[SiteChange]
    sites_total: int
    stages: list[StageChange] | None


# --- check -------------------------------------------------------------------------------------


class _GrowthCheck(TypedDict, total=False):
    baseline_bytes: int  # max_growth only
    growth_bytes: int


class BudgetCheck(_GrowthCheck):
    name: Literal["max_peak", "max_reserved", "max_growth"]
    ok: bool
    value: int
    limit: int
    message: str


class BudgetResult(TypedDict):
    ok: bool
    device: int
    source: str
    peak_active_bytes: int
    peak_reserved_bytes: int
    checks: list[BudgetCheck]
    violations: list[str]


class CheckOutput(TypedDict):
    ok: bool
    source: str
    devices: list[BudgetResult]


# --- leaks -------------------------------------------------------------------------------------


class Occurrence(TypedDict):
    name: str
    occurrence: int
    first_event: int
    last_event: int
    start_bytes: int
    end_bytes: int
    left_alive_bytes: int
    left_alive_count: int


class SuspectSite(Site):
    per_occurrence: list[int]


class LeakGroup(TypedDict):
    base_name: str
    count: int
    occurrences: list[Occurrence]
    growth_bytes: int
    growth_per_step_bytes: int
    steady_growth_bytes: int | None
    suspects_bytes: int
    suspects_count: int
    suspects: list[SuspectSite]
    first_only_bytes: int
    first_only: list[Site]
    grew: list[NetSite]


class LeaksResult(TypedDict):
    device: int
    notes: list[str]
    groups: list[LeakGroup]


# --- anomalies ---------------------------------------------------------------------------------


class LateFree(Allocation):
    delay_events: int
    delay_us: int | None


class LargeTemporary(Allocation):
    lifetime_events: int


class LateFrees(TypedDict):
    count: int
    bytes: int
    by_site: list[Site]
    items: list[LateFree]


class LargeTemporaries(TypedDict):
    count: int
    bytes: int
    min_bytes: int
    by_site: list[Site]
    items: list[LargeTemporary]


class GapStretch(TypedDict):
    first_event: int
    last_event: int
    max_gap_bytes: int
    max_gap_event: int
    active_bytes: int
    reserved_bytes: int


class ReservedGaps(TypedDict):
    max_gap_bytes: int
    max_gap_event: int
    count: int
    stretches: list[GapStretch]


class Thresholds(TypedDict):
    late_min_events: int
    late_min_us: int | None
    temp_min_bytes: int
    temp_max_events: int
    gap_min_bytes: int
    gap_ratio: float


class AnomaliesResult(TypedDict):
    device: int
    late_frees: LateFrees
    large_temporaries: LargeTemporaries
    reserved_gaps: ReservedGaps
    thresholds: Thresholds


# --- fragmentation -----------------------------------------------------------------------------


class Block(TypedDict):
    address: str
    version: int
    size: int  # requested
    state: Literal["active_allocated", "active_pending_free"]
    row: int


class SegmentInfo(TypedDict):
    """A segment without its blocks (the viewer draws them with an offset of their own)."""

    address: str
    size: int
    stream: int
    is_expandable: bool
    pool: list[int] | None  # memory pool id pair ((0, 0): default); None: unknown
    free_bytes: int
    largest_free_bytes: int


class Segment(SegmentInfo):
    blocks: list[Block]


class StateSummary(Point):
    """The allocator state at an event without its segments (fragmentation's at_peak/end)."""

    device: int
    segments_bytes: int
    allocated_bytes: int
    n_segments: int
    n_blocks: int
    blocks_outside_segments: int
    free_bytes: int
    largest_free_bytes: int
    fragmentation: float


class _StateExtras(TypedDict, total=False):
    segments: list[Segment]  # absent with blocks=False (--no-blocks)
    inconsistencies: int  # only when > 0


class AllocatorState(StateSummary, _StateExtras):
    """state_at: the segments and blocks right after an event."""


class FragmentationCurve(TypedDict):
    event: list[int]
    active_bytes: list[int]
    reserved_bytes: list[int]
    gap_bytes: list[int]
    free_bytes: list[int]
    largest_free_bytes: list[int]
    n_segments: list[int]


class FragmentationResult(TypedDict):
    device: int
    max_gap_bytes: int
    max_gap_event: int
    inconsistencies: int
    curve: FragmentationCurve
    at_peak: StateSummary
    end: StateSummary | None


# --- oom ---------------------------------------------------------------------------------------


class OomEntry(TypedDict):
    event: int
    time_us: int | None
    requested_bytes: int
    device_free_bytes: int


class OomDetail(OomEntry):
    active_bytes: int
    reserved_bytes: int
    reserved_unused_bytes: int
    free_in_segments_bytes: int
    largest_free_bytes: int
    fits_in_a_free_block: bool
    n_segments: int
    live_count: int
    top_sites: list[Site]
    site: str | None
    # "device_full" | "fragmentation" | "another_process" | "stream_or_pool" (oom_verdict)
    verdict: str
    outside_bytes: int | None  # held outside this process (needs --device-memory)


class OomReport(TypedDict):
    device: int
    count: int
    ooms: list[OomDetail]


class OomOutput(TypedDict):
    source: str
    devices: list[OomReport]


# --- advise ------------------------------------------------------------------------------------


class AdviceReplay(TypedDict):
    """The trace's own requests replayed through the allocator model under `settings`."""

    settings: str
    recorded: bool  # the snapshot's own settings (the others are what-ifs)
    peak_reserved_bytes: int
    saving_bytes: int  # the recorded peak reserved minus this one
    mismatched_events: int  # recorded settings: alloc/free events whose reserved differs
    oom_fits: bool | None  # with an OOM: would every failed request have fitted (None: none)


class Finding(TypedDict):
    kind: str  # fragmentation, oom, attention, sharding, leak, checkpoint, autocast, weight_casts
    summary: str  # one sentence
    bytes: int  # at stake
    certainty: str  # "exact" or "estimate"
    covers: str  # what the figure covers and assumes
    sites: list[Site]
    change: str  # the change to make, as text to paste (a setting, code)
    knob: str | None  # the `memlens plan --what-if` that tests it (None: no knob does)


class AdviceCheck(TypedDict):
    """A finding tested by simulating the user's script with the knob that answers it
    (`memlens advise --script`, planning.verify)."""

    finding: int  # its index in `findings`
    kind: str
    knob: str | None  # the what-if simulated (None: no knob tests this finding)
    compared: str  # "reserved" or "active": the peak the finding's bytes are of
    predicted_bytes: int  # the finding's bytes
    simulated_saving_bytes: int | None  # baseline simulation's peak minus the knob's
    simulated_baseline_bytes: int | None  # that peak in the baseline simulation
    applied: list[str]  # what a code knob covered, or that it did not
    note: str  # why there is no figure, or what to read into it


class AdviseResult(TypedDict):
    device: int
    peak_active_bytes: int
    peak_reserved_bytes: int
    replays: list[AdviceReplay]
    findings: list[Finding]  # largest bytes first
    notes: list[str]
    checks: list[AdviceCheck]  # with --script: the findings a knob tests, simulated


# --- ranks -------------------------------------------------------------------------------------


class RankRow(TypedDict):
    label: str
    source: str
    device: int
    peak_active_bytes: int
    peak_event: int
    peak_reserved_bytes: int
    baseline_bytes: int
    end_active_bytes: int
    trace_entries: int


class Imbalance(TypedDict):
    peak_max_bytes: int
    peak_min_bytes: int
    peak_mean_bytes: int
    spread_bytes: int
    max_over_mean: float | None
    max_label: str
    min_label: str


class RankSite(TypedDict):
    site: str
    bytes: list[int]  # per rank
    spread_bytes: int


class RanksResult(TypedDict):
    ranks: list[RankRow]
    imbalance: Imbalance | None
    sites: list[RankSite]


# --- sql ---------------------------------------------------------------------------------------


class QueryResult(TypedDict):
    columns: list[str]
    types: list[str]
    rows: list[list[object]]
    truncated: bool


# --- export ------------------------------------------------------------------------------------


ExportFormat = Literal["chrome-trace", "snapshot-json", "parquet"]


class ExportOutput(TypedDict):
    format: ExportFormat
    path: str
    bytes: int
    files: list[str]


class ExportResult(TypedDict):
    source: str
    outputs: list[ExportOutput]
    merged_into: str | None
    clock_base_us: int
    warnings: list[str]


# --- summary -----------------------------------------------------------------------------------


class PoolBytes(TypedDict):
    """Live bytes of one memory pool: `pool` the id pair ((0, 0) the default pool), None
    where neither the trace nor the segments say."""

    pool: list[int] | None
    bytes: int
    count: int


class DeviceSummary(TypedDict):
    device: int
    trace_entries: int
    actions: dict[str, int]
    time_start_us: int | None
    time_end_us: int | None
    duration_s: float | None
    truncated: bool
    starts_mid_run: bool
    preexisting_freed_in_trace: int
    preexisting_alive_throughout: int
    baseline_bytes: int
    peak_active_bytes: int
    peak_event_index: int
    peak_time_us: int | None
    end_active_bytes: int
    reserved_start_bytes: int
    peak_reserved_bytes: int
    peak_reserved_event_index: int
    end_reserved_bytes: int
    allocations: int
    live_at_peak: int
    streams: int
    annotations: int
    top_sites: list[Site]
    ooms: list[OomEntry]
    pools_at_peak: list[PoolBytes]
    # the private pools the snapshot names anywhere (entries' pool_id, final segments'
    # segment_pool_id): none means nothing suggests a private pool behind an unknown one
    private_pools: list[list[int]]


class Summary(TypedDict):
    schema: int
    source: str
    annotations: int
    allocator_settings: dict[str, object]
    format_notes: list[str]
    warnings: list[str]
    devices: list[DeviceSummary]

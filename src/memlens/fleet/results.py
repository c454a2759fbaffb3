"""The JSON of `memlens fleet --json` as types (docs/json-schema.md, `memlens fleet`)."""

from __future__ import annotations

from typing import TypedDict

from memlens.analysis.results import Figure, OomEntry, Site, SiteChange, StageChange


class FigureStats(TypedDict):
    median: float
    mad: float  # median absolute deviation
    scale: float  # 1.4826 x MAD, floored (see memlens.fleet.aggregate)
    ranks: int  # ok ranks that have this figure


class FleetRow(TypedDict):
    """One rank: its RankRecord's fields, then its place in the fleet."""

    rank: int
    path: str
    status: str  # "ok" | "failed"
    reason: str | None
    device: int | None
    trace_entries: int
    baseline_bytes: int
    peak_active_bytes: int
    peak_event_index: int
    peak_time_us: int | None
    end_active_bytes: int
    peak_reserved_bytes: int
    peak_reserved_event_index: int
    end_reserved_bytes: int
    ooms: list[OomEntry]
    stage_peaks: dict[str, int]
    category_bytes: dict[str, int]
    top_sites: list[Site]
    fingerprint: str
    worker: str
    group: int | None
    outlier: bool
    z: dict[str, float]


class FlaggedFigure(TypedDict):
    name: str  # "peak_active_bytes", "stage:forward", "category:activation", ...
    value: int
    median: float
    z: float
    change_pct: float | None  # None when the median is 0


class OutlierDiff(TypedDict):
    """`memlens diff` of the median rank (A) and the outlier (B), cut to the largest
    changes; "error" says why there is none (the other fields are then empty)."""

    error: str | None
    figures: list[Figure]
    sites: list[SiteChange]
    sites_total: int
    stages: list[StageChange] | None


class Outlier(TypedDict):
    rank: int
    path: str
    max_abs_z: float
    figures: list[FlaggedFigure]  # largest |z| first
    diff: OutlierDiff | None  # None beyond --diffs


class Group(TypedDict):
    group: int
    fingerprint: str
    count: int
    ranks: list[int]
    peak_active_bytes: int  # of its first rank


class StageImbalance(TypedDict):
    stage: str
    ranks: int
    min_bytes: int
    min_rank: int
    median_bytes: float
    max_bytes: int
    max_rank: int
    spread_bytes: int
    max_over_median: float | None


class FailedRow(TypedDict):
    rank: int
    path: str
    reason: str | None


class FailureReason(TypedDict):
    reason: str  # the rows' reason with the file's path as FILE
    ranks: int
    first_rank: int


class FleetResult(TypedDict):
    schema: int
    executor: str | None
    rank_source: str | None
    ranks_total: int
    ranks_ok: int
    ranks_failed: int
    threshold_z: float
    tolerance: float
    median_rank: int | None
    figures: dict[str, FigureStats]
    table: list[FleetRow]
    outliers: list[Outlier]
    groups: list[Group]
    stages: list[StageImbalance]
    failed: list[FailedRow]
    failure_reasons: list[FailureReason]  # the failed rows grouped by reason

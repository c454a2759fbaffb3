"""`memlens plan --json`: the result's types (docs/json-schema.md, tested against them)."""

from __future__ import annotations

from typing import TypedDict

from memlens.analysis.results import SiteChange


class PlanPoint(TypedDict):
    values: dict[str, str]  # swept argument -> its value at this point
    argv: list[str]  # the script's arguments at this point
    env: dict[str, str]  # environment variables set for the script (--sweep-env, the hook)
    peak_active_bytes: int
    peak_reserved_bytes: int
    oom: bool  # the script ran out of the usable memory (peaks are up to the OOM)
    fits: bool | None  # ran to the end within the usable memory; None: no capacity given
    error: str | None  # the script failed for another reason
    cached: bool
    # "simulated", or "interpolated": fitted allocation sizes replayed (--interpolate)
    source: str


class PlanFit(TypedDict):
    args: list[str]
    constant_bytes: float
    linear_bytes: list[float]  # per argument, bytes per unit
    quadratic_bytes: list[float]  # per argument, bytes per unit squared
    max_residual_bytes: float
    points: int
    largest_fitting: float | None  # one argument: the model's largest value within usable


class PlanGroup(TypedDict):
    """The points sharing one value of each non-numeric swept argument (e.g. `--pattern`
    forward-only vs full-training-step), fitted over the numeric ones alone."""

    values: dict[str, str]  # the non-numeric swept arguments' values
    largest_fitting: dict[str, str] | None  # one numeric swept argument: its largest fitting
    fit: PlanFit | None  # of peak reserved over the group's numeric arguments
    fit_active: PlanFit | None


class PlanPrediction(TypedDict):
    values: dict[str, float]
    peak_reserved_bytes: float
    peak_active_bytes: float  # from fit_active
    extrapolated: bool


class PlanFindMax(TypedDict):
    arg: str
    lo: int
    hi: int
    largest_fitting: int | None  # None: even `lo` does not fit
    simulations: int  # simulations run (cached points not counted)
    probes: list[PlanPoint]  # in the order probed
    step: int  # the values tried are lo, lo + step, ... and hi
    margin_bytes: int | None  # usable minus peak reserved at the answer
    shortfall_bytes: int | None  # what the next value needs minus usable (--interpolate)
    failing: list[int]  # values below the answer that do not fit (memory not monotone)
    interpolated: bool  # bisection on interpolated replays, confirmed by simulation
    confirmed: bool | None  # the simulations at the answer and the next step agreed
    fit: PlanFit | None  # peak reserved over the probes that ran to the end


class PlanWhatIf(TypedDict):
    setting: str  # added to PYTORCH_CUDA_ALLOC_CONF, or a code knob (simulation.knobs)
    kind: str  # "allocator", "code", or "mixed" (a combination of both)
    points: list[PlanPoint]  # the sweep's points, in the same order, under `setting`
    active_change_bytes: list[int]  # per point: its peak active minus the baseline's
    reserved_change_bytes: list[int]  # per point: its peak reserved minus the baseline's
    applied: list[list[str]]  # per point: what a code knob covered, or that it did not


class PlanKnobPart(TypedDict):
    """One knob of a combination, alone, at the table point."""

    setting: str
    reserved_saving_bytes: int  # the baseline's peak reserved minus this knob's alone
    active_saving_bytes: int
    error: str | None


class PlanKnobRow(TypedDict):
    setting: str
    kind: str
    peak_active_bytes: int
    peak_reserved_bytes: int
    reserved_saving_bytes: int  # the baseline's peak reserved minus this one
    reserved_saving_pct: float | None  # of the baseline's (None: baseline 0)
    active_saving_bytes: int
    active_saving_pct: float | None
    parts: list[PlanKnobPart]  # a combination (`a,b`): each of its knobs alone; else empty
    oom: bool
    fits: bool | None
    error: str | None
    applied: list[str]
    sites: list[SiteChange]  # a = baseline, b = with the knob; largest |change| first


class PlanKnobTable(TypedDict):
    point: int  # index in `points`: the one with the largest baseline peak reserved
    values: dict[str, str]
    baseline_peak_active_bytes: int
    baseline_peak_reserved_bytes: int
    rows: list[PlanKnobRow]  # largest reserved saving first; failed what-ifs last


class PlanResult(TypedDict):
    schema: int
    script: str
    executor: str  # where the points ran: the local pool, or the Dask cluster
    gpu: str
    capacity_bytes: int | None  # the card's memory; None: unlimited
    reserve_bytes: int
    usable_bytes: int | None  # capacity minus reserve: what PyTorch may reserve
    points: list[PlanPoint]
    largest_fitting: dict[str, str] | None  # one swept argument: its largest fitting value
    fit: PlanFit | None  # of peak reserved
    fit_active: PlanFit | None  # of peak active (no allocator rounding or caching in it)
    groups: list[PlanGroup]  # some swept argument not numeric: a fit per value of it
    predictions: list[PlanPrediction]
    find_max: PlanFindMax | None
    what_ifs: list[PlanWhatIf]
    knob_table: PlanKnobTable | None  # with --what-if: which knob saves most, and where
    simulations: int

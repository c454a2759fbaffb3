"""`memlens plan --interpolate`: the sweep's rows and `--find-max` from a few simulations
(planning/interpolate.py), each row saying whether it was simulated or interpolated, and
find-max's answer confirmed by simulation at the answer and at the next step."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from memlens.errors import MemlensError
from memlens.planning.hook import Hook
from memlens.planning.interpolate import Estimate, Interpolator, Misfit, figures_of
from memlens.planning.request import PointRequest
from memlens.planning.results import PlanFindMax, PlanPoint
from memlens.planning.runner import Runner, point
from memlens.planning.sweep import PointSpec, Search, Sweep, configure
from memlens.planning.worker import PointFigures

# Values find-max scans one by one (each an interpolated replay) to see where memory is
# not monotone; a longer range is bisected instead.
SCAN_AT_MOST = 256
# Values a default --step leaves in the range, about.
DEFAULT_VALUES = 64


def default_step(lo: int, hi: int) -> int:
    """The largest of 1, 2, 5, 10, 20, 50, ... leaving at least DEFAULT_VALUES values in
    [lo, hi]: a bisection to one integer is finer than the question needs."""
    span = (hi - lo) / DEFAULT_VALUES
    if span < 2:
        return 1
    tens = 10 ** math.floor(math.log10(span))
    return max(int(m * tens) for m in (1, 2, 5) if m * tens <= span)


def grid(lo: int, hi: int, step: int) -> list[int]:
    values = list(range(lo, hi + 1, step))
    return values if values[-1] == hi else [*values, hi]


def _row(
    interp: Interpolator, spec: PointSpec, est: Estimate, usable: int | None
) -> tuple[PlanPoint, PointFigures]:
    figures = figures_of(est)
    cached = est.source == "simulated" and est.value in interp.cached
    return point(spec, figures, cached, usable, est.source), figures


def _integers(sweep: Sweep) -> list[int]:
    try:
        return [int(v) for v in sweep.values]
    except ValueError:
        raise MemlensError(
            f"--interpolate needs integer values (--sweep {sweep.arg}={','.join(sweep.values)})"
        ) from None


def interpolated_points(
    runner: Runner,
    base: PointRequest,
    args: Sequence[str],
    sweeps: Sequence[Sweep],
    usable: int | None,
    hook: Hook | None,
) -> tuple[list[tuple[PlanPoint, PointFigures]], int]:
    """The sweep's rows, in its order, and the simulations they took."""
    if len(sweeps) != 1:
        raise MemlensError("--interpolate needs exactly one --sweep (or --sweep-env)")
    sweep = sweeps[0]
    values = _integers(sweep)
    env_names = [sweep.arg] if sweep.env else []

    def spec_of(v: int) -> PointSpec:
        return configure(args, {sweep.arg: str(v)}, env_names, hook)

    interp = Interpolator(runner, base, spec_of, usable)
    interp.cover(sorted(set(values)))
    rows = [_row(interp, spec_of(v), interp.at(v), usable) for v in values]
    return rows, interp.simulations


def interpolated_find_max(
    runner: Runner, base: PointRequest, search: Search, step: int | None, usable: int
) -> PlanFindMax:
    """The largest value of lo, lo + step, ..., hi that fits: every value covered by
    interpolation, scanned (or bisected, past SCAN_AT_MOST values), then simulated at the
    answer and the next value to confirm it. Those two simulations are also the fit's
    check points (Interpolator.propose): where they disagree with it, the fit is split and
    the search run again, until the answer and the next value are simulated and every fit
    gives every simulated value to the byte."""
    arg, lo, hi, spec_of = search.arg, search.lo, search.hi, search.spec
    step = step or default_step(lo, hi)
    values = grid(lo, hi, step)
    before = runner.simulated
    interp = Interpolator(runner, base, spec_of, usable)
    runner.say(f"find-max: covering {len(values)} values of {arg} (step {step}) by interpolation")
    interp.propose(values)
    while True:
        try:
            best, failing = _search(values, interp)
        except Misfit as miss:
            interp.reject(miss.segment)
            continue
        after = [v for v in values if best is None or v > best][:1]
        check = ([] if best is None else [best]) + after
        runner.say(f"find-max: confirming {', '.join(f'{arg}={v}' for v in check)} by simulation")
        # one batch: the confirming values and any fit they do not check
        interp.simulate(check + interp.check_points(check))
        if interp.settle():
            break
    for v in check:  # their own logs' figures now (simulate() forgot the interpolated)
        interp.at(v)
    probes = [_row(interp, spec_of(e.value), e, usable)[0] for e in interp.looked_at()]
    found = search.answer(best, probes, runner.simulated - before)
    found.update(
        {
            "step": step,
            "margin_bytes": None
            if best is None
            else usable - interp.at(best).replayed.peak_reserved,
            # what the next value needs (its run with unlimited memory), not its peak up to
            # the OOM
            "shortfall_bytes": None if not after else interp.needs(after[0]) - usable,
            "failing": failing,
            "interpolated": True,
            # the answer and the next value are simulated, and every fit gives them (and
            # every other simulated value) to the byte: settle() left none unverified
            "confirmed": True,
        }
    )
    return found


def _search(values: list[int], interp: Interpolator) -> tuple[int | None, list[int]]:
    """(the largest fitting value, the values below it that do not fit) by the covered
    values' replays at the capacity."""

    def fits(v: int) -> bool:
        return not interp.at(v).replayed.oom

    if len(values) > SCAN_AT_MOST:
        return _bisect(values, fits), []
    ok = [v for v in values if fits(v)]
    best = ok[-1] if ok else None
    return best, [v for v in values if best is not None and v < best and not fits(v)]


def _bisect(values: list[int], fits: Callable[[int], bool]) -> int | None:
    """The largest fitting value, memory taken to grow with the value."""
    if fits(values[-1]):
        return values[-1]
    if not fits(values[0]):
        return None
    good, bad = 0, len(values) - 1
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if fits(values[mid]) else (good, mid)
    return values[good]

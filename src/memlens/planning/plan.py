"""`memlens plan`: a sweep's points, the memory PyTorch can use, the fitted model, the
largest fitting value, and bisection for it (`find_max`)."""

from __future__ import annotations

import itertools
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memlens.errors import MemlensError
from memlens.planning.fit import Fit, fit, numeric
from memlens.planning.hook import Hook
from memlens.planning.request import PointRequest
from memlens.planning.results import (
    PlanFindMax,
    PlanFit,
    PlanGroup,
    PlanPoint,
    PlanPrediction,
    PlanResult,
)
from memlens.planning.runner import Runner, point, sweep_figures
from memlens.planning.sweep import Search, Sweep, grid
from memlens.simulation.config import SimulateConfig
from memlens.simulation.gpus import gpu_preset
from memlens.simulation.script import ScriptTarget
from memlens.units import parse_bytes

# What a real card's CUDA context, cuBLAS/cuDNN handles and kernels' modules take outside
# PyTorch's allocator before the first tensor: ~500 MiB on an H100 or A100 with CUDA 12's
# lazy module loading (total minus torch.cuda.mem_get_info()'s free in a fresh process).
# An assumption, not a measurement of the user's card: --reserve replaces it.
DEFAULT_RESERVE = 512 * 2**20


@dataclass
class Setup:
    """The card and the memory the script may use: `usable` is what the simulation's
    device memory is set to, so a point that would not fit gets the OOM it would get."""

    gpu: str | None
    capacity: int | None
    reserve: int
    routing: str | None = None  # a mixture of experts' routing (simulate --routing)

    @classmethod
    def of(
        cls,
        gpu: str | None,
        device_memory: str | None,
        reserve: str | None,
        routing: str | None = None,
    ) -> Setup:
        card = gpu_preset(gpu)
        capacity = parse_bytes(device_memory) if device_memory is not None else None
        if capacity is None and gpu is not None:
            capacity = card.memory
        r = DEFAULT_RESERVE if reserve is None else parse_bytes(reserve)
        if capacity is not None and r >= capacity:
            raise MemlensError(f"--reserve {r:,} bytes leaves nothing of {capacity:,}")
        return cls(gpu, capacity, r, routing)

    @property
    def usable(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.reserve

    def config(self, alloc_conf: str | None) -> SimulateConfig:
        """The points' simulation settings: the card, the usable memory, the allocator
        settings as given or as $PYTORCH_CUDA_ALLOC_CONF has them now (part of the cache
        key). Stacks are off: the worker turns them on when a point wants call sites."""
        conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") if alloc_conf is None else alloc_conf
        return SimulateConfig(
            gpu=self.gpu,
            device_memory=self.usable,
            alloc_conf=conf,
            stacks=None,
            routing=self.routing,
        )


@dataclass(frozen=True)
class Interpolation:
    """`--interpolate` and find-max's `--step` (None: a default for the range)."""

    on: bool = False
    step: int | None = None


def largest_fitting(sweeps: Sequence[Sweep], points: Sequence[PlanPoint]) -> dict[str, str] | None:
    """One swept argument with numeric values: its largest value whose point fits."""
    if len(sweeps) != 1:
        return None
    arg = sweeps[0].arg
    fitting = [p["values"][arg] for p in points if p["fits"]]
    nums = [(numeric(v), v) for v in fitting]
    if not nums or any(n is None for n, _ in nums):
        return None
    return {arg: max(nums, key=lambda nv: nv[0] or 0.0)[1]}


def fit_points(
    sweeps: Sequence[Sweep], points: Sequence[PlanPoint], key: str = "peak_reserved_bytes"
) -> Fit | None:
    """A peak (`key`) against the swept arguments, over the points that ran to the end (an
    OOM point's peak stops at the OOM); None when some swept value is not a number."""
    args = [s.arg for s in sweeps]
    ran = [p for p in points if p["error"] is None and not p["oom"]]
    xs = []
    for p in ran:
        x = {a: numeric(p["values"][a]) for a in args}
        if any(v is None for v in x.values()):
            return None
        xs.append({a: float(v) for a, v in x.items() if v is not None})
    return fit(args, xs, [p[key] for p in ran])  # type: ignore[literal-required]


def describe_fit(model: Fit, usable: int | None) -> PlanFit:
    integer = len(model.args) == 1  # swept values given as integers are bisected as such
    best = model.largest_below(usable, integer) if usable is not None and integer else None
    return {
        "args": list(model.args),
        "constant_bytes": model.constant,
        "linear_bytes": list(model.linear),
        "quadratic_bytes": list(model.quadratic),
        "max_residual_bytes": model.max_residual,
        "points": model.points,
        "largest_fitting": best,
    }


def groups(
    sweeps: Sequence[Sweep], points: Sequence[PlanPoint], usable: int | None
) -> list[PlanGroup]:
    """With a non-numeric swept argument (`--pattern=forward-only,full-training-step`) no
    single polynomial fits: one group per combination of the non-numeric values, each with
    its largest fitting value and its fits over the numeric arguments. Empty when every
    swept argument is numeric (the top-level fit covers it)."""
    labels = [s for s in sweeps if any(numeric(v) is None for v in s.values)]
    if not labels:
        return []
    nums = [s for s in sweeps if s not in labels]
    out: list[PlanGroup] = []
    for combo in itertools.product(*(s.values for s in labels)):
        values = {s.arg: v for s, v in zip(labels, combo, strict=True)}
        mine = [p for p in points if all(p["values"][k] == v for k, v in values.items())]
        model = fit_points(nums, mine) if nums else None
        active = fit_points(nums, mine, "peak_active_bytes") if nums else None
        out.append(
            {
                "values": values,
                "largest_fitting": largest_fitting(nums, mine) if usable is not None else None,
                "fit": None if model is None else describe_fit(model, usable),
                "fit_active": None if active is None else describe_fit(active, None),
            }
        )
    return out


def predictions(
    model: Fit | None, active: Fit | None, specs: Sequence[str]
) -> list[PlanPrediction]:
    """`--predict 'ARG=V[,ARG2=V2]'`: the models at a point, flagged when outside the fit
    (both models are over the same points)."""
    out: list[PlanPrediction] = []
    for spec in specs:
        if model is None or active is None:
            raise MemlensError("--predict needs a fit: numeric swept values that ran")
        values: dict[str, float] = {}
        for part in spec.split(","):
            arg, _, v = part.partition("=")
            x = numeric(v)
            if arg not in model.args or x is None:
                raise MemlensError(f"--predict {spec!r}: give each swept argument as ARG=NUMBER")
            values[arg] = x
        if set(values) != set(model.args):
            raise MemlensError(
                f"--predict {spec!r}: give a value for each of {', '.join(model.args)}"
            )
        peak, outside = model.predict(values)
        out.append(
            {
                "values": values,
                "peak_reserved_bytes": peak,
                "peak_active_bytes": active.predict(values)[0],
                "extrapolated": outside,
            }
        )
    return out


def check_find(usable: int | None, lo: int, hi: int) -> None:
    if usable is None:
        raise MemlensError("--find-max needs a capacity: --gpu NAME or --device-memory SIZE")
    if not 1 <= lo <= hi:
        raise MemlensError(f"--find-max needs 1 <= --lo <= --hi (got {lo}, {hi})")


def probes_fit(arg: str, probes: Sequence[PlanPoint], usable: int | None) -> PlanFit | None:
    """Peak reserved over find-max's probes, for the page's curve (None: fewer than 2)."""
    values = tuple(dict.fromkeys(p["values"][arg] for p in probes))
    model = fit_points([Sweep(arg, values)], probes) if len(values) > 1 else None
    return None if model is None else describe_fit(model, usable)


def probes_at_most(lo: int, hi: int) -> int:
    """Bisection's simulations at most: `hi`, `lo`, then one per halving of (lo, hi)."""
    return 1 if lo == hi else 2 + max(0, math.ceil(math.log2(hi - lo)))


def find_max(runner: Runner, base: PointRequest, search: Search, usable: int | None) -> PlanFindMax:
    """Bisection on the fitting boundary, memory taken to grow with `search.arg` (a script
    argument, an environment variable, or a name handed to the sweep hook): `hi` first
    (all fits: done), then `lo` (none fits: done), then ceil(log2(hi - lo)) midpoints."""
    arg, lo, hi = search.arg, search.lo, search.hi
    check_find(usable, lo, hi)
    probes: list[PlanPoint] = []
    before = runner.simulated
    most = probes_at_most(lo, hi)
    started = time.monotonic()

    def fits(value: int) -> bool:
        spent = time.monotonic() - started
        left = (
            ""
            if not probes
            else f", about {spent / len(probes) * (most - len(probes)):.0f} s left at most"
        )
        runner.say(
            f"find-max: probe {len(probes) + 1} of at most {most}, {arg}={value} "
            f"({spent:.0f} s elapsed{left})"
        )
        spec = search.spec(value)
        ((figures, cached),) = runner.run([spec.request(base)], [spec.label])
        probes.append(point(spec, figures, cached, usable))
        if figures["error"] is not None:
            raise MemlensError(f"{' '.join(spec.argv)}: {figures['error']}")
        return not figures["oom"]

    best: int | None
    if fits(hi):
        best = hi
    elif lo == hi or not fits(lo):
        best = None
    else:
        good, bad = lo, hi
        while bad - good > 1:
            mid = (good + bad) // 2
            good, bad = (mid, bad) if fits(mid) else (good, mid)
        best = good
    reserved = {int(p["values"][arg]): p["peak_reserved_bytes"] for p in probes}
    assert usable is not None  # check_find
    found = search.answer(best, probes, runner.simulated - before)
    # the next value ran out of memory: its peak stops at the OOM, so what it needs is
    # unknown here (--interpolate replays it with unlimited memory): no shortfall
    found["margin_bytes"] = None if best is None else usable - reserved[best]
    return found


def plan(
    script: str,
    args: Sequence[str],
    *,
    sweeps: Sequence[Sweep] = (),
    setup: Setup,
    jobs: int = 1,
    use_cache: bool = True,
    progress: Callable[[str], None] | None = None,
    predict: Sequence[str] = (),
    find: tuple[str, int, int] | None = None,
    knobs: Sequence[str] = (),
    alloc_conf: str | None = None,
    hook: Hook | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    interpolate: bool = False,
    step: int | None = None,
) -> PlanResult:
    """The whole of `memlens plan`: the sweep (one point, the script as given, without
    one), its fit and predictions, the what-ifs, then the bisection when asked. The points
    run on a local pool of `jobs` processes, or on the Dask cluster `scheduler`. With
    `interpolate`, the sweep's rows and find-max (on values `step` apart) come from a few
    simulations (planning/interpolate.py)."""
    remote = None if scheduler in (None, "", "local") else scheduler  # "local": the pool here
    runner = Runner(jobs, use_cache, progress, scheduler=remote, workers=workers)
    # a point's request: the script, the card's settings, call sites when the knob table
    # needs them; each point sets its arguments and environment (PointSpec.request)
    base = PointRequest(ScriptTarget(script), setup.config(alloc_conf), sites=bool(knobs))
    try:
        how = Interpolation(interpolate, step)
        return _plan(runner, base, args, sweeps, setup, predict, find, knobs, hook, how)
    finally:
        runner.close()


def _plan(
    runner: Runner,
    base: PointRequest,
    args: Sequence[str],
    sweeps: Sequence[Sweep],
    setup: Setup,
    predict: Sequence[str],
    find: tuple[str, int, int] | None,
    knobs: Sequence[str],
    hook: Hook | None,
    how: Interpolation,
) -> PlanResult:
    from memlens.planning.interpolated_plan import interpolated_find_max, interpolated_points
    from memlens.planning.whatif import check_knob, knob_table, what_ifs

    if how.step is not None and not how.on:
        raise MemlensError("--step needs --interpolate (plain --find-max bisects to one integer)")

    for knob in knobs:  # a bad knob or range fails before any simulation
        check_knob(knob)
    if find is not None:
        check_find(setup.usable, find[1], find[2])
    specs = grid(args, sweeps, hook) if sweeps or not find else []
    if how.on and sweeps:
        ran, _ = interpolated_points(runner, base, args, sweeps, setup.usable, hook)
    else:
        ran = sweep_figures(runner, base, specs, setup.usable)
    if how.on and sweeps and ran and knobs:
        from memlens.planning.whatif_interpolated import interpolated_what_ifs

        ran, done, alone = interpolated_what_ifs(
            knobs, setup.usable, runner, base, args, sweeps, hook, specs, ran
        )
    else:
        done, alone = (
            what_ifs(setup.usable, runner, base, specs, ran, knobs) if ran and knobs else ([], {})
        )
    points = [p for p, _ in ran]
    model = fit_points(sweeps, points) if sweeps else None
    active = fit_points(sweeps, points, "peak_active_bytes") if sweeps else None
    result: PlanResult = {
        "schema": 1,
        "script": base.target.script,
        "executor": runner.executor,
        "gpu": gpu_preset(setup.gpu).name,
        "capacity_bytes": setup.capacity,
        "reserve_bytes": setup.reserve,
        "usable_bytes": setup.usable,
        "points": points,
        "largest_fitting": largest_fitting(sweeps, points) if setup.usable is not None else None,
        "fit": None if model is None else describe_fit(model, setup.usable),
        "fit_active": None if active is None else describe_fit(active, None),
        "groups": groups(sweeps, points, setup.usable),
        "predictions": predictions(model, active, predict),
        "find_max": None,
        "what_ifs": [w for w, _ in done],
        "knob_table": knob_table(ran, done, alone) if done else None,
        "simulations": 0,
    }
    if find is not None:
        env_names = tuple(s.arg for s in sweeps if s.env)
        search = Search(tuple(args), *find, env_names, hook)
        if how.on:
            assert setup.usable is not None  # check_find
            found = interpolated_find_max(runner, base, search, how.step, setup.usable)
        else:
            found = find_max(runner, base, search, setup.usable)
        found["fit"] = probes_fit(found["arg"], found["probes"], setup.usable)
        result["find_max"] = found
    result["simulations"] = runner.simulated
    return result

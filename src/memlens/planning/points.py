"""Points of a sweep: the script's arguments for each, one simulation per point in its own
process (a fresh interpreter: the script's imports and module state never leak from one
point to the next), and a cache of the figures keyed by what determines them."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any, TypedDict

from memlens.errors import MemlensError
from memlens.planning.results import PlanPoint
from memlens.planning.sites import PeakSite, peak_sites
from memlens.snapshot.store.cache import cache_root

# Bump when the figures a cached point holds change meaning.
CACHE_FORMAT = 2


class PointFigures(TypedDict):
    """What one simulation gave: the whole run's peaks, whether the script ran out of the
    simulated memory, or why it failed (`error`, figures then 0)."""

    peak_active_bytes: int
    peak_reserved_bytes: int
    oom: bool
    error: str | None
    applied: list[str]  # what each code knob covered, or that it did not apply (knobs.py)
    sites: list[PeakSite]  # bytes live at the peak per call site, for the knob table


@dataclass(frozen=True)
class Sweep:
    """`--sweep 'ARG=V1,V2,...'`: a script argument and its values, in the given order."""

    arg: str
    values: tuple[str, ...]

    @classmethod
    def parse(cls, spec: str) -> Sweep:
        arg, sep, values = spec.partition("=")
        items = tuple(v.strip() for v in values.split(","))
        if not sep or not arg.strip() or not all(items):
            raise MemlensError(
                f"--sweep {spec!r}: expected 'ARG=V1,V2,...', e.g. '--batch-size=1,2,4'"
            )
        return cls(arg.strip(), items)


def with_value(args: Sequence[str], arg: str, value: str) -> list[str]:
    """The script's arguments with `arg` set to `value`: replaced where it is given (as
    `ARG V` or `ARG=V`), appended as `ARG V` where it is not."""
    out, i, found = [], 0, False
    while i < len(args):
        a = args[i]
        if a == arg and i + 1 < len(args):
            out += [arg, value]
            i, found = i + 2, True
            continue
        if a.startswith(arg + "="):
            out.append(f"{arg}={value}")
            found = True
        else:
            out.append(a)
        i += 1
    return out if found else [*out, arg, value]


def grid(args: Sequence[str], sweeps: Sequence[Sweep]) -> list[tuple[dict[str, str], list[str]]]:
    """Every point of the cartesian product of `sweeps`: ({arg: value}, the script's argv)."""
    names = [s.arg for s in sweeps]
    if len(set(names)) != len(names):
        raise MemlensError("each argument may be swept only once")
    points = []
    for combo in itertools.product(*(s.values for s in sweeps)):
        argv = list(args)
        for name, value in zip(names, combo, strict=True):
            argv = with_value(argv, name, value)
        points.append((dict(zip(names, combo, strict=True)), argv))
    return points


def cache_key(script: str, argv: Sequence[str], options: dict[str, Any]) -> str:
    """The script's bytes (not its path or time: a copy or a touch still hits), its argv
    and the simulation options. Modules the script imports are not part of the key."""
    from memlens import __version__

    try:
        source = Path(script).read_bytes()
    except OSError as exc:
        raise MemlensError(f"no such script: {script} ({exc.strerror})") from None
    ident = {
        "script_sha256": hashlib.sha256(source).hexdigest(),
        "argv": list(argv),
        "options": options,
        "memlens": __version__,
        "format": CACHE_FORMAT,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]


def _cache_path(key: str) -> Path:
    return cache_root() / "plan" / f"{key}.json"


def cached(key: str) -> PointFigures | None:
    try:
        data = json.loads(_cache_path(key).read_text())
    except (OSError, ValueError):
        return None
    want = PointFigures.__annotations__.keys()
    return data if isinstance(data, dict) and data.keys() == want else None  # type: ignore[return-value]


def store(key: str, figures: PointFigures) -> None:
    """Write atomically (a concurrent plan reads a whole entry or none)."""
    path = _cache_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(figures, f)
    os.replace(tmp, path)


def simulate_point(script: str, argv: list[str], options: dict[str, Any]) -> PointFigures:
    """One simulation (in a pool worker): the whole run's peaks and the bytes per call
    site at the peak, with the code knobs of `options["knobs"]` (simulation.knobs)
    patched in around the script. The snapshot goes to a temporary file: plan keeps only
    the figures."""
    import memlens
    from memlens.simulation.api import run_script
    from memlens.simulation.knobs import applied

    options = dict(options)
    knobs = options.pop("knobs", None) or []
    # call sites cost the stacks' collection: only the knob table needs them
    with_sites = bool(options.pop("sites", False))
    with tempfile.TemporaryDirectory(prefix="memlens-plan-") as tmp, applied(knobs) as patched:
        try:
            run = run_script(
                script,
                argv,
                Path(tmp) / "point.pickle",
                stacks="python" if with_sites else None,
                **options,
            )
        except MemlensError as exc:  # ScriptFailed included: the point's row says why
            return {
                "peak_active_bytes": 0,
                "peak_reserved_bytes": 0,
                "oom": False,
                "error": str(exc),
                "applied": patched.report(None),
                "sites": [],
            }
    dev = memlens.load(run.whole, warn=False).device(0)
    return {
        "peak_active_bytes": int(dev.peak_active_bytes),
        "peak_reserved_bytes": int(dev.peak_reserved_bytes),
        "oom": run.oom is not None,
        "error": None,
        "applied": patched.report(run.sim.sdpa_backends),
        "sites": peak_sites(dev) if with_sites else [],
    }


def _context() -> BaseContext:
    """A fresh process per point (max_tasks_per_child=1), never a fork of this process's
    state, forked from a server that has imported torch and the simulator once: importing
    torch took 3-10 s of each point's time on a busy 2-core machine. The script's cwd and
    environment are inherited."""
    if "forkserver" not in get_all_start_methods():
        return get_context("spawn")
    context = get_context("forkserver")
    context.set_forkserver_preload(["torch", "memlens", "memlens.simulation.api"])
    return context


def _simulate_job(job: tuple[int, str, list[str], dict[str, Any]]) -> tuple[int, PointFigures]:
    i, script, argv, options = job
    # The worker is this point's alone: the script's prints (and C-level writes) go to
    # stderr, never into the plan's stdout (its --json).
    sys.stdout.flush()
    os.dup2(2, 1)
    return i, simulate_point(script, argv, options)


@dataclass
class Runner:
    """Runs points (from the cache when it has them) on a pool of `jobs` processes, with a
    line on stderr as each finishes. `simulated` counts the simulations actually run."""

    script: str
    options: dict[str, Any]
    jobs: int = 1
    use_cache: bool = True
    progress: Callable[[str], None] | None = None
    simulated: int = 0

    def run(
        self,
        argvs: Iterable[list[str]],
        labels: Sequence[str] | None = None,
        options: Sequence[dict[str, Any]] | None = None,
    ) -> list[tuple[PointFigures, bool]]:
        """(figures, from the cache) for each argv, in order; `labels` name the points in
        the progress lines (default: the argv); `options`, one per argv, replace the
        runner's (the what-ifs of a plan share one pool)."""
        argvs = list(argvs)
        names = list(labels) if labels is not None else [" ".join(a) for a in argvs]
        each = list(options) if options is not None else [self.options] * len(argvs)
        # The call sites are not part of the key: an entry stored with them serves a run
        # without; one stored without is simulated again when they are wanted.
        keys = [
            cache_key(self.script, a, {k: v for k, v in o.items() if k != "sites"})
            for a, o in zip(argvs, each, strict=True)
        ]
        out: list[tuple[PointFigures, bool] | None] = [None] * len(argvs)
        todo = []
        for i, key in enumerate(keys):
            hit = cached(key) if self.use_cache else None
            if hit is not None and each[i].get("sites") and not hit["sites"]:
                hit = None
            if hit is not None:
                out[i] = (hit, True)
            else:
                todo.append(i)
        done = len(argvs) - len(todo)
        if todo and len(argvs) > 1:
            self._say(f"{done}/{len(argvs)} points from the cache; simulating {len(todo)}")
        if todo:
            # multiprocessing's Pool, not ProcessPoolExecutor: its max_tasks_per_child is
            # Python 3.11+, and a fresh process per point is the point (see _context).
            jobs = [(i, self.script, argvs[i], each[i]) for i in todo]
            workers = max(1, min(self.jobs, len(todo)))
            with _context().Pool(workers, maxtasksperchild=1) as pool:
                started = time.monotonic()
                for i, figures in pool.imap_unordered(_simulate_job, jobs):
                    self.simulated += 1
                    done += 1
                    if figures["error"] is None and self.use_cache:
                        store(keys[i], figures)
                    out[i] = (figures, False)
                    self._say(
                        f"[{done}/{len(argvs)}] {names[i]} simulated "
                        f"({time.monotonic() - started:.1f} s)"
                    )
        return [o for o in out if o is not None]

    def _say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)


def point(
    values: dict[str, str], argv: list[str], f: PointFigures, cached: bool, usable: int | None
) -> PlanPoint:
    ran = f["error"] is None
    return {
        "values": values,
        "argv": argv,
        "peak_active_bytes": f["peak_active_bytes"],
        "peak_reserved_bytes": f["peak_reserved_bytes"],
        "oom": f["oom"],
        "fits": None if usable is None or not ran else not f["oom"],
        "error": f["error"],
        "cached": cached,
    }


def sweep_figures(
    runner: Runner, args: Sequence[str], sweeps: Sequence[Sweep], usable: int | None
) -> list[tuple[PlanPoint, PointFigures]]:
    """Each point of the sweep with the figures it came from (call sites, knobs)."""
    points = grid(args, sweeps)
    labels = [" ".join(f"{k}={v}" for k, v in values.items()) for values, _ in points]
    results = runner.run([argv for _, argv in points], labels)
    return [(point(v, a, f, c, usable), f) for (v, a), (f, c) in zip(points, results, strict=True)]

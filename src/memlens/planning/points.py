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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError
from memlens.planning.hook import Hook
from memlens.planning.results import PlanPoint
from memlens.planning.worker import PointFigures, failed, simulate_point
from memlens.snapshot.store.cache import cache_root

if TYPE_CHECKING:
    from memlens.execution.executors import Executor

# Bump when the figures a cached point holds change meaning.
CACHE_FORMAT = 2


@dataclass(frozen=True)
class Sweep:
    """`--sweep 'ARG=V1,V2,...'`: a script argument and its values, in the given order;
    `--sweep-env 'NAME=V1,...'` (env): an environment variable of the script instead."""

    arg: str
    values: tuple[str, ...]
    env: bool = False

    @classmethod
    def parse(cls, spec: str, env: bool = False) -> Sweep:
        arg, sep, values = spec.partition("=")
        items = tuple(v.strip() for v in values.split(","))
        if not sep or not arg.strip() or not all(items):
            flag, what = ("--sweep-env", "NAME") if env else ("--sweep", "ARG")
            example = "BATCH=1,2,4" if env else "--batch-size=1,2,4"
            raise MemlensError(f"{flag} {spec!r}: expected '{what}=V1,V2,...', e.g. '{example}'")
        if env and not arg.strip().isidentifier():
            raise MemlensError(f"--sweep-env {spec!r}: {arg.strip()!r} is not a variable name")
        return cls(arg.strip(), items, env)


@dataclass(frozen=True)
class PointSpec:
    """One point: the swept values, the script's arguments and the environment variables
    it runs with on top of the inherited ones."""

    values: dict[str, str]
    argv: list[str]
    env: dict[str, str]

    @property
    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.values.items())

    def options(self, options: dict[str, Any]) -> dict[str, Any]:
        """`options` with this point's environment: part of its cache key (a run without
        one keeps the key it had before --sweep-env existed)."""
        return {**options, "env": self.env} if self.env else options


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


def configure(
    args: Sequence[str],
    values: dict[str, str],
    env_names: Iterable[str] = (),
    hook: Hook | None = None,
) -> PointSpec:
    """A point's run: each value of `env_names` an environment variable, the others script
    arguments, or, with a hook, handed to it (hook.py) with the script's arguments."""
    envs = set(env_names)
    env = {k: v for k, v in values.items() if k in envs}
    rest = {k: v for k, v in values.items() if k not in envs}
    if hook is not None:
        argv, more = hook.call(rest, list(args))
        return PointSpec(values, argv, {**env, **more})
    argv = list(args)
    for name, value in rest.items():
        argv = with_value(argv, name, value)
    return PointSpec(values, argv, env)


def grid(args: Sequence[str], sweeps: Sequence[Sweep], hook: Hook | None = None) -> list[PointSpec]:
    """Every point of the cartesian product of `sweeps`, in order."""
    names = [s.arg for s in sweeps]
    if len(set(names)) != len(names):
        raise MemlensError("each argument may be swept only once")
    env_names = [s.arg for s in sweeps if s.env]
    return [
        configure(args, dict(zip(names, combo, strict=True)), env_names, hook)
        for combo in itertools.product(*(s.values for s in sweeps))
    ]


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


def _context() -> BaseContext:
    """A fresh process per point (max_tasks_per_child=1), never a fork of this process's
    state, forked from a server that has imported torch and the simulator once: importing
    torch took 3-10 s of each point's time on a busy 2-core machine. The server starts
    isolated (execution/isolated.py: a json.py in the current folder is not imported in
    place of the standard one); the script's cwd and environment are inherited."""
    if "forkserver" not in get_all_start_methods():
        return get_context("spawn")
    from memlens.execution.isolated import isolated_forkserver

    return isolated_forkserver(["torch", "memlens", "memlens.simulation.api"])


def _simulate_job(job: tuple[int, str, list[str], dict[str, Any]]) -> tuple[int, PointFigures]:
    i, script, argv, options = job
    # The worker is this point's alone: the script's prints (and C-level writes) go to
    # stderr, never into the plan's stdout (its --json).
    sys.stdout.flush()
    os.dup2(2, 1)
    return i, simulate_point(script, argv, options)


@dataclass
class Runner:
    """Runs points (from the cache when it has them) on a pool of `jobs` processes, or on
    a Dask cluster (`scheduler`, as `memlens fleet --scheduler`; `workers` sizes a
    dask-local one), with a line on stderr as each finishes. `simulated` counts the
    simulations actually run. close() lets a cluster go."""

    script: str
    options: dict[str, Any]
    jobs: int = 1
    use_cache: bool = True
    progress: Callable[[str], None] | None = None
    simulated: int = 0
    scheduler: str | None = None
    workers: int | None = None
    _executor: Executor | None = None

    @property
    def executor(self) -> str:
        if self.scheduler is None:
            return f"local pool ({self.jobs} process{'es' if self.jobs > 1 else ''})"
        if self._executor is not None:
            return self._executor.name
        # every point came from the cache: no cluster was needed, none is reached to name it
        return f"{self.scheduler} (not used: every point was cached)"

    def _cluster(self) -> Executor:
        """The Dask client, made once for the plan's runs (a dask-local cluster takes
        seconds to start)."""
        from memlens.execution.executors import make_executor

        if self._executor is None:
            self._executor = make_executor(self.scheduler, self.workers or self.jobs)
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def _simulate(
        self, jobs: list[tuple[int, str, list[str], dict[str, Any]]]
    ) -> Iterator[tuple[int, PointFigures]]:
        """(index, figures) of each job as it finishes, on the pool or the cluster."""
        if self.scheduler is not None:
            from memlens.execution.executors import TaskLost
            from memlens.planning.cluster import simulate_isolated, task

            tasks = [task(script, argv, options) for _, script, argv, options in jobs]
            for k, got in self._cluster().map_unordered(simulate_isolated, tasks):
                # a TaskLost (the worker died, or Dask gave up): the point's row says why
                yield jobs[k][0], failed(got.reason) if isinstance(got, TaskLost) else got
            return
        # multiprocessing's Pool, not ProcessPoolExecutor: its max_tasks_per_child is
        # Python 3.11+, and a fresh process per point is the point (see _context).
        workers = max(1, min(self.jobs, len(jobs)))
        with _context().Pool(workers, maxtasksperchild=1) as pool:
            yield from pool.imap_unordered(_simulate_job, jobs)

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
        started = time.monotonic()
        if todo:
            for i, figures in self._simulate([(i, self.script, argvs[i], each[i]) for i in todo]):
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


def point(spec: PointSpec, f: PointFigures, cached: bool, usable: int | None) -> PlanPoint:
    ran = f["error"] is None
    return {
        "values": spec.values,
        "argv": spec.argv,
        "env": spec.env,
        "peak_active_bytes": f["peak_active_bytes"],
        "peak_reserved_bytes": f["peak_reserved_bytes"],
        "oom": f["oom"],
        "fits": None if usable is None or not ran else not f["oom"],
        "error": f["error"],
        "cached": cached,
    }


def sweep_figures(
    runner: Runner, points: Sequence[PointSpec], usable: int | None
) -> list[tuple[PlanPoint, PointFigures]]:
    """Each point of the sweep with the figures it came from (call sites, knobs)."""
    results = runner.run(
        [p.argv for p in points],
        [p.label for p in points],
        [p.options(runner.options) for p in points],
    )
    return [(point(p, f, c, usable), f) for p, (f, c) in zip(points, results, strict=True)]

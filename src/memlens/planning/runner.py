"""Running a plan's points: one simulation per point in its own process (a fresh
interpreter: the script's imports and module state never leak from one point to the
next), on a local pool or a Dask cluster, through the cache; and a point's row."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from multiprocessing.context import BaseContext
from typing import TYPE_CHECKING

from memlens.planning.point_cache import cache_key, cached, store
from memlens.planning.request import PointRequest
from memlens.planning.results import PlanPoint
from memlens.planning.sweep import PointSpec
from memlens.planning.worker import PointFigures, failed, simulate_point

if TYPE_CHECKING:
    from memlens.execution.executors import Executor


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


def _simulate_job(job: tuple[int, PointRequest]) -> tuple[int, PointFigures]:
    i, request = job
    # The worker is this point's alone: the script's prints (and C-level writes) go to
    # stderr, never into the plan's stdout (its --json).
    sys.stdout.flush()
    os.dup2(2, 1)
    return i, simulate_point(request)


@dataclass
class Runner:
    """Runs points (from the cache when it has them) on a pool of `jobs` processes, or on
    a Dask cluster (`scheduler`, as `memlens fleet --scheduler`; `workers` sizes a
    dask-local one), with a line on stderr as each finishes. `simulated` counts the
    simulations actually run. close() lets a cluster go."""

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

    def _simulate(self, jobs: list[tuple[int, PointRequest]]) -> Iterator[tuple[int, PointFigures]]:
        """(index, figures) of each job as it finishes, on the pool or the cluster."""
        if self.scheduler is not None:
            from memlens.execution.executors import TaskLost
            from memlens.planning.cluster import simulate_isolated, task

            tasks = [task(request) for _, request in jobs]
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
        self, requests: Sequence[PointRequest], labels: Sequence[str] | None = None
    ) -> list[tuple[PointFigures, bool]]:
        """(figures, from the cache) for each request, in order; `labels` name the points
        in the progress lines (default: the arguments)."""
        names = list(labels) if labels is not None else [" ".join(r.target.args) for r in requests]
        keys = [cache_key(r) for r in requests]
        out: list[tuple[PointFigures, bool] | None] = [None] * len(requests)
        todo = []
        for i, key in enumerate(keys):
            hit = cached(key) if self.use_cache else None
            # an entry stored without call sites (or requests) is simulated again when
            # they are wanted
            if hit is not None and requests[i].sites and not hit["sites"]:
                hit = None
            if hit is not None and requests[i].requests and hit["requests"] is None:
                hit = None
            if hit is not None:
                out[i] = (hit, True)
            else:
                todo.append(i)
        done = len(requests) - len(todo)
        if todo and len(requests) > 1:
            self.say(f"{done}/{len(requests)} points from the cache; simulating {len(todo)}")
        started = time.monotonic()
        if todo:
            for i, figures in self._simulate([(i, requests[i]) for i in todo]):
                self.simulated += 1
                done += 1
                if figures["error"] is None and self.use_cache:
                    store(keys[i], figures)
                out[i] = (figures, False)
                self.say(
                    f"[{done}/{len(requests)}] {names[i]} simulated "
                    f"({time.monotonic() - started:.1f} s)"
                )
        return [o for o in out if o is not None]

    def say(self, line: str) -> None:
        if self.progress is not None:
            self.progress(line)


def point(
    spec: PointSpec,
    f: PointFigures,
    cached: bool,
    usable: int | None,
    source: str = "simulated",
) -> PlanPoint:
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
        "source": source,
    }


def sweep_figures(
    runner: Runner, base: PointRequest, points: Sequence[PointSpec], usable: int | None
) -> list[tuple[PlanPoint, PointFigures]]:
    """Each point of the sweep (`base` at its arguments and environment) with the
    figures it came from (call sites, knobs)."""
    results = runner.run([p.request(base) for p in points], [p.label for p in points])
    return [(point(p, f, c, usable), f) for p, (f, c) in zip(points, results, strict=True)]

"""Where the per-rank tasks run: a local process pool (default) or a Dask cluster.

Both stream results back as tasks finish, so the parent holds one small result per rank
and never a snapshot. A task that is lost with its worker is run again: the local pool
reruns the tasks that were in flight one at a time, so a second death names the one file
that causes it (a failed row) and no other; Dask reschedules them itself (its
`allowed-failures`) and retries a task that raised once (`retries=1`). Each result comes
out exactly once, tagged with the index of its task.
"""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Protocol

from memlens.errors import MemlensError


@dataclass(frozen=True)
class TaskLost:
    """A task that produced no result: its worker died (twice, locally) or Dask gave up."""

    reason: str


class Executor(Protocol):
    name: str

    def map_unordered(
        self, fn: Callable[[Any], Any], items: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]: ...

    def close(self) -> None: ...


def default_workers() -> int:
    """The cores this process may use (the affinity mask, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class LocalPool:
    """concurrent.futures.ProcessPoolExecutor sized to the cores; a worker reads one
    snapshot at a time (at most two tasks per worker are in flight)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or default_workers()
        if self.workers < 1:
            raise MemlensError("--workers must be at least 1")
        self.name = f"local pool ({self.workers} process{'es' if self.workers > 1 else ''})"
        self._pool: ProcessPoolExecutor | None = None

    def _new_pool(self) -> ProcessPoolExecutor:
        # spawn, not fork: the parent may run a progress thread (rich) or a Dask client,
        # and forking a process with threads can deadlock the child
        ctx = multiprocessing.get_context("spawn")
        return ProcessPoolExecutor(self.workers, mp_context=ctx)

    def map_unordered(
        self, fn: Callable[[Any], Any], items: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        todo = list(range(len(items) - 1, -1, -1))  # a stack: pop() gives index 0 first
        # Tasks in flight when a worker died: any of them may have killed it. Each runs
        # again alone, so a second death names the file that causes it and no other.
        suspects: list[int] = []
        running: dict[Future[Any], int] = {}
        while todo or suspects or running:
            pool = self._pool = self._pool or self._new_pool()
            # two tasks per worker in flight: the next is queued while one runs, so no
            # worker waits for the parent between files (each still reads one at a time)
            width = 1 if suspects else 2 * self.workers
            queue = suspects if suspects else todo
            broken = False
            while queue and len(running) < width:
                i = queue.pop()
                try:
                    running[pool.submit(fn, items[i])] = i
                except BrokenProcessPool:  # a worker died between two results
                    broken = True
                    running[_lost_future()] = i
                    break
            if not broken:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = running.pop(fut)
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        broken = True
                        running[_lost_future()] = i  # handled with the others below
                        continue
                    except Exception as exc:  # the task raised (it catches its own errors)
                        result = TaskLost(" ".join(f"{type(exc).__name__}: {exc}".split()))
                    yield i, result
            if broken:
                if width == 1:  # it ran alone: it is the one that kills its worker
                    (i,) = running.values()
                    yield i, TaskLost("its worker process died while reading it (twice)")
                else:
                    suspects.extend(sorted(running.values(), reverse=True))
                for fut in running:
                    fut.cancel()
                running.clear()
                pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _lost_future() -> Future[Any]:
    """A placeholder for a task whose pool broke under it (no result will come)."""
    fut: Future[Any] = Future()
    fut.set_exception(BrokenProcessPool("worker died"))
    return fut


class DaskExecutor:
    """The same tasks on a Dask distributed cluster: an existing scheduler
    (`tcp://HOST:PORT`) or a LocalCluster started here (`dask-local`)."""

    CONNECT_TIMEOUT = "10s"  # to reach an existing scheduler

    def __init__(self, scheduler: str, workers: int | None = None) -> None:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise MemlensError(
                "--scheduler needs Dask distributed: pip install 'memlens[fleet]'"
            ) from None
        self._cluster = None
        try:
            if scheduler == "dask-local":
                self._cluster = LocalCluster(
                    n_workers=workers or default_workers(),
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                )
                self.client = Client(self._cluster)
                self.name = f"Dask LocalCluster ({len(self._cluster.workers)} workers)"
            else:
                self.client = Client(scheduler, timeout=self.CONNECT_TIMEOUT)
                self.name = f"Dask cluster at {scheduler}"
        except OSError as exc:
            self.close()
            raise MemlensError(f"cannot reach the Dask scheduler {scheduler}: {exc}") from None

    def map_unordered(
        self, fn: Callable[[Any], Any], items: Sequence[Any]
    ) -> Iterator[tuple[int, Any]]:
        from distributed import as_completed

        if not items:
            return
        run = uuid.uuid4().hex[:12]
        keys = [f"memlens-fleet-{run}-{i}" for i in range(len(items))]
        index = {k: i for i, k in enumerate(keys)}
        futures = self.client.map(fn, items, key=keys, retries=1, pure=False)
        seen: set[int] = set()
        for fut in as_completed(futures):
            i = index[fut.key]
            try:
                result = fut.result()
            except Exception as exc:  # KilledWorker after Dask's own retries, or the task
                result = TaskLost(" ".join(f"{type(exc).__name__}: {exc}".split()))
            fut.release()  # the result lives here now, not in the cluster
            if i not in seen:
                seen.add(i)
                yield i, result

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def make_executor(scheduler: str | None = None, workers: int | None = None) -> Executor:
    """None or "local": the local pool; "dask-local" or "tcp://HOST:PORT": Dask."""
    if scheduler in (None, "", "local"):
        return LocalPool(workers)
    if scheduler == "dask-local" or "://" in scheduler:
        return DaskExecutor(scheduler, workers)
    raise MemlensError(
        f"--scheduler {scheduler!r}: give tcp://HOST:PORT (an existing Dask scheduler), "
        "dask-local, or local"
    )

"""`memlens simulate --nproc-per-node N`: a torchrun-shaped launcher for the simulator.

Each picked rank runs the script once, in its own pool worker (or Dask task, as
`memlens fleet` runs its ranks), with the environment torchrun gives that rank, and
writes `rank<R>.pickle` into one directory, which `memlens fleet DIR` reads as it is.
The results stream back small (a file name and two peaks), in rank order at the end.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from memlens.execution.executors import TaskLost, default_workers, make_executor
from memlens.execution.isolated import run_isolated, serve
from memlens.simulation.config import SimulateConfig
from memlens.simulation.distributed.env import RENDEZVOUS, RENDEZVOUS_TIMEOUT, SIMULATED, World
from memlens.simulation.script import ScriptTarget


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to simulate `rank`: the script with its arguments, the
    snapshot file to write, torchrun's environment for the rank and the simulation's
    settings."""

    rank: int
    target: ScriptTarget
    output: str
    env: dict[str, str]
    config: SimulateConfig
    cwd: str = field(default_factory=os.getcwd)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "target": self.target.to_json()}

    @classmethod
    def from_json(cls, fields: dict[str, Any]) -> RankTask:
        target = ScriptTarget.from_json(fields["target"])
        config = SimulateConfig(**fields["config"])
        return cls(**{**fields, "target": target, "config": config})


@dataclass(frozen=True)
class RankResult:
    """A rank's outcome: its file and peaks (bytes, the whole run's), or why it failed
    (`error`, with the script's own traceback when it raised)."""

    rank: int
    output: str | None
    peak_active: int | None = None
    peak_reserved: int | None = None
    oom: str | None = None
    error: str | None = None
    traceback: str = ""
    notes: tuple[str, ...] = ()
    # sha256 of the requested sizes of every allocation, in trace order: two ranks with
    # equal peaks and equal signatures ran the same allocations (the symmetry test)
    signature: str | None = None

    @property
    def shape(self) -> tuple[int | None, int | None, str | None] | None:
        """What two ranks must share to count as equal: None for a failed rank."""
        if self.error is not None or self.signature is None:
            return None
        return (self.peak_active, self.peak_reserved, self.signature)


def run_rank(task: RankTask) -> RankResult:
    """Simulate one rank in a fresh interpreter started from this worker (a pool process
    or a Dask worker): a worker may be handed several ranks (one that started first takes
    the next task while another is still importing torch), and a simulation leaves state
    behind (the default process group, torch's patches, the script's modules), so a
    second rank run in the same process would not be the rank a fresh one is."""
    done = run_isolated("memlens.simulation.distributed.launch", task.to_json())
    if done.error is not None:
        return RankResult(task.rank, None, error=f"its process {done.error}")
    sys.stderr.write(done.stderr)  # the script's own messages, as it wrote them
    return RankResult(**{**done.answer, "notes": tuple(done.answer["notes"])})


def _run_rank_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """run_rank's child: the task's fields in, the result's out."""
    return asdict(run_rank_here(RankTask.from_json(fields)))


def run_rank_here(task: RankTask) -> RankResult:
    """Simulate one rank in this process: its environment is torchrun's for the rank
    (other variables as inherited), its working directory the launcher's."""
    import hashlib
    import warnings

    import numpy as np

    from memlens.errors import MemlensError
    from memlens.simulation.api import run_target
    from memlens.simulation.script import ScriptFailed
    from memlens.snapshot.actions import Action
    from memlens.snapshot.loader import load

    os.environ.update(task.env)
    os.chdir(task.cwd)
    try:
        run = run_target(task.target, task.output, task.config)
    except ScriptFailed as failed:
        written = None if failed.written is None else str(failed.written)
        return RankResult(task.rank, written, error=str(failed), traceback=failed.traceback)
    except MemlensError as exc:
        return RankResult(task.rank, None, error=str(exc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the figures only; `memlens fleet` says the rest
        device = load(run.whole, warn=False).device(0)
    sizes = device.size[device.action == Action.ALLOC].astype("<i8")
    return RankResult(
        task.rank,
        str(Path(run.output)),
        device.peak_active_bytes,
        device.peak_reserved_bytes,
        run.oom,
        notes=tuple(run.notes),
        signature=hashlib.sha256(np.ascontiguousarray(sizes).tobytes()).hexdigest(),
    )


def rank_file(directory: str | Path, rank: int) -> Path:
    """Where rank `rank`'s snapshot goes: a name `memlens fleet` reads its rank from."""
    return Path(directory) / f"rank{rank}.pickle"


def simulate_ranks(
    target: ScriptTarget,
    directory: str | Path,
    world: World,
    ranks: Sequence[int],
    *,
    config: SimulateConfig | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    on_result: Callable[[RankResult], None] | None = None,
) -> list[RankResult]:
    """Simulate `ranks` of `world` running `target`; one RankResult per rank, in the
    order of `ranks` (a rank whose worker died is a failed result, not an exception).
    `on_result` hears each as it finishes."""
    config = config or SimulateConfig()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # the workers may run elsewhere (Dask): every path they get is absolute
    target = target.absolute()
    # where the ranks' object collectives meet (distributed/objects.py): fresh per job
    rendezvous = directory.absolute() / ".rendezvous"
    shutil.rmtree(rendezvous, ignore_errors=True)
    meet = {RENDEZVOUS: str(rendezvous), SIMULATED: ",".join(map(str, ranks))}
    workers = workers or min(len(ranks), default_workers())
    if scheduler is not None or workers < len(ranks):
        meet[RENDEZVOUS_TIMEOUT] = "0"  # ranks may run one after another: never wait
    tasks = [
        RankTask(
            rank,
            target,
            str(rank_file(directory, rank).absolute()),
            {**world.env(rank), **meet},
            config,
        )
        for rank in ranks
    ]
    executor = make_executor(scheduler, workers)
    results: dict[int, RankResult] = {}
    try:
        for i, result in executor.map_unordered(run_rank, tasks):
            if isinstance(result, TaskLost):
                result = RankResult(tasks[i].rank, None, error=result.reason)
            results[i] = result
            if on_result is not None:
                on_result(result)
    finally:
        executor.close()
        shutil.rmtree(rendezvous, ignore_errors=True)
    return [results[i] for i in range(len(tasks))]


if __name__ == "__main__":
    serve(_run_rank_fields)

"""One simulated rank: the script run under torchrun's environment for that rank, its
snapshot written, and the figures the launcher's table needs (a small, picklable result:
the launcher runs ranks in pool workers or on a Dask cluster)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from memlens.simulation.config import SimulateConfig


@dataclass(frozen=True)
class RankTask:
    """What a worker needs to simulate `rank`: the script, its arguments, the snapshot
    file to write, torchrun's environment for the rank and the simulation's settings."""

    rank: int
    script: str
    args: tuple[str, ...]
    output: str
    env: dict[str, str]
    config: SimulateConfig
    module: bool = False
    whole_run: bool = False
    cwd: str = field(default_factory=os.getcwd)


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


def run_rank(task: RankTask) -> RankResult:
    """Simulate one rank in this process (a pool worker): its environment is torchrun's
    for the rank (other variables as inherited), its working directory the launcher's."""
    import warnings

    from memlens.errors import MemlensError
    from memlens.simulation.api import run_script
    from memlens.simulation.script import ScriptFailed
    from memlens.snapshot.loader import load

    os.environ.update(task.env)
    os.chdir(task.cwd)
    try:
        run = run_script(
            task.script, list(task.args), task.output, module=task.module,
            whole_run=task.whole_run, config=task.config,
        )  # fmt: skip
    except ScriptFailed as failed:
        written = None if failed.written is None else str(failed.written)
        return RankResult(task.rank, written, error=str(failed), traceback=failed.traceback)
    except MemlensError as exc:
        return RankResult(task.rank, None, error=str(exc))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the figures only; `memlens fleet` says the rest
        device = load(run.whole, warn=False).device(0)
    return RankResult(
        task.rank, str(Path(run.output)), device.peak_active_bytes,
        device.peak_reserved_bytes, run.oom, notes=tuple(run.notes),
    )  # fmt: skip

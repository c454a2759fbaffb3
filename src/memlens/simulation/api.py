"""`memlens.simulate(...)`: run CUDA code without a GPU and get its memory snapshot."""

from __future__ import annotations

import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memlens.errors import MemlensError
from memlens.simulation.allocator import AllocatorSettings
from memlens.simulation.gpus import gpu_preset
from memlens.simulation.script import ScriptFailed, script_traceback
from memlens.units import parse_bytes

if TYPE_CHECKING:
    from memlens.simulation.session import Simulation


def simulate(
    output: str | Path | None = None,
    *,
    device_memory: str | int | None = None,
    stacks: str | None = "python",
    expandable_segments: bool | None = None,
    max_split_size_mb: int | None = None,
    roundup_power2_divisions: int | None = None,
    alloc_conf: str | None = None,
    cublas_workspace: str | int | None = None,
    max_entries: int | None = None,
    gpu: str | None = None,
    nvtx_annotations: bool = True,
    early_stacks: bool = False,
) -> Simulation:
    """A context manager that runs its block with simulated CUDA memory.

        with memlens.simulate("out.pickle", gpu="a100") as sim:
            model = Model().cuda(); model(x).sum().backward()
        sim.snapshot  # the dict written to out.pickle

    Tensors created on `cuda` are fake (no memory, no values); every storage goes through
    a model of PyTorch's CUDA caching allocator. `gpu` (a card such as "a100", "h100",
    "t4", or a generation such as "ampere", "hopper"; default an H100 with unlimited
    memory) sets the cuBLAS workspace, the device memory and what torch.cuda answers;
    `cublas_workspace` and `device_memory` override it. `alloc_conf` defaults to
    $PYTORCH_CUDA_ALLOC_CONF; the keyword options override it. Allocations beyond the
    device memory raise torch.OutOfMemoryError after an `oom` trace entry. `max_entries`
    keeps only the newest trace entries, like the recorder's ring buffer. Inside the
    block, `torch.cuda.memory._record_memory_history` / `_dump_snapshot` work as on a GPU;
    blocks allocated before the code switched history on have no stacks, as on a GPU,
    unless `early_stacks`. torch.cuda.nvtx ranges become annotations unless
    `nvtx_annotations=False`. `sim.notes` lists the approximate paths the run took.
    """
    from memlens.simulation.session import Simulation  # imports torch

    conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") if alloc_conf is None else alloc_conf
    settings = AllocatorSettings.parse(conf)
    if expandable_segments is not None:
        settings.expandable_segments = expandable_segments
    if max_split_size_mb is not None:
        settings.max_split_size = max_split_size_mb * 2**20
    if roundup_power2_divisions is not None:
        settings.roundup_power2_divisions = [roundup_power2_divisions] * 16
    card = gpu_preset(gpu)
    if device_memory is None and gpu is not None:
        device_memory = card.memory
    return Simulation(
        output,
        device_memory=None if device_memory is None else parse_bytes(device_memory),
        settings=settings,
        alloc_conf=conf,
        stacks=stacks,
        cublas_workspace=None if cublas_workspace is None else parse_bytes(cublas_workspace),
        max_entries=max_entries,
        gpu=card,
        nvtx_annotations=nvtx_annotations,
        early_stacks=early_stacks,
    )


@dataclass
class ScriptRun:
    """What `run_script` did: the session, the snapshot written and where, an OOM."""

    sim: Simulation
    snapshot: dict[str, Any]
    output: Path
    own_dump: bool  # the snapshot is the script's own last _dump_snapshot
    oom: str | None = None
    notes: list[str] = field(default_factory=list)


def run_script(script: str | Path, args: list[str], output: str | Path, **options) -> ScriptRun:
    """Run `script` as __main__ under simulate(**options) and write its snapshot.

    The snapshot is the script's own last `torch.cuda.memory._dump_snapshot` when it made
    one (the same window and the same state at dump time), else the whole run at exit.
    A script that fails (any exception but a simulated OOM, or a non-zero exit) raises
    ScriptFailed with its own traceback and writes nothing; an OOM still writes.
    """
    import torch

    script = Path(script)
    if not script.is_file():
        raise MemlensError(f"no such script: {script}")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    sim = simulate(None, **options)
    oom = None
    try:
        with sim:
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exit_:
                if exit_.code not in (None, 0):
                    raise ScriptFailed(script, f"it exited with code {exit_.code}", "") from None
    except torch.OutOfMemoryError as exc:
        oom = str(exc)
    except ScriptFailed:
        raise
    except Exception as exc:
        raise ScriptFailed(script, f"{type(exc).__name__}: {exc}", script_traceback(exc)) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    own = sim.last_dump is not None
    snapshot = sim.last_dump if sim.last_dump is not None else sim.snapshot
    assert snapshot is not None  # __exit__ built it
    path = sim.write(output, snapshot)
    return ScriptRun(sim, snapshot, path, own, oom, list(sim.notes))

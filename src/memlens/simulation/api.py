"""`memlens.simulate(...)`: run CUDA code without a GPU and get its memory snapshot."""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from memlens.errors import MemlensError
from memlens.simulation.allocator import AllocatorSettings
from memlens.units import parse_bytes


def simulate(
    output: str | Path | None = None,
    *,
    device_memory: str | int | None = None,
    stacks: str | None = "python",
    expandable_segments: bool | None = None,
    max_split_size_mb: int | None = None,
    roundup_power2_divisions: int | None = None,
    alloc_conf: str | None = None,
    cublas_workspace: str | int = "32MiB",
    max_entries: int | None = None,
):
    """A context manager that runs its block with simulated CUDA memory.

        with memlens.simulate("out.pickle", device_memory="80GiB") as sim:
            model = Model().cuda(); model(x).sum().backward()
        sim.snapshot  # the dict written to out.pickle

    Tensors created on `cuda` are fake (no memory, no values); every storage goes through
    a model of PyTorch's CUDA caching allocator. `alloc_conf` defaults to
    $PYTORCH_CUDA_ALLOC_CONF; the keyword options override it. `device_memory` makes
    allocations beyond it raise torch.OutOfMemoryError after an `oom` trace entry.
    `cublas_workspace` is what cuBLAS reserves per thread on the first matmul (32 MiB on
    Hopper, 8.125 MiB on older GPUs; 0 to leave it out). `max_entries` keeps only the
    newest trace entries, like the recorder's ring buffer. Inside the block,
    `torch.cuda.memory._record_memory_history` / `_dump_snapshot` work as on a GPU.
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
    return Simulation(
        output,
        device_memory=None if device_memory is None else parse_bytes(device_memory),
        settings=settings,
        alloc_conf=conf,
        stacks=stacks,
        cublas_workspace=0 if cublas_workspace is None else parse_bytes(cublas_workspace),
        max_entries=max_entries,
    )


def run_script(script: str | Path, args: list[str], **options) -> dict:
    """Run `script` as __main__ under simulate(**options); returns the snapshot dict."""
    script = Path(script)
    if not script.is_file():
        raise MemlensError(f"no such script: {script}")
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    sim = simulate(**options)
    try:
        with sim:
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exit_:
                if exit_.code not in (None, 0):
                    raise
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    return sim.snapshot

"""`memlens simulate script.py [args...]`: run CUDA code without a GPU, write its snapshot."""

from __future__ import annotations

import os
from pathlib import Path

import click

from memlens.cli.options import script_command, status
from memlens.errors import MemlensError


def _default_output(script: str) -> Path:
    return Path(f"memlens-sim-{Path(script).stem}.{os.getpid()}.pickle")


def _summary(path: Path) -> str:
    try:
        import memlens

        dev = memlens.load(path).device(0)
    except Exception as exc:  # the file is written; only the summary is missing
        return f"(no summary: {exc})"
    gib = 2**30
    return (
        f"predicted peak active {dev.peak_active_bytes / gib:.2f} GiB, peak reserved "
        f"{dev.peak_reserved_bytes / gib:.2f} GiB, {dev.n_events:,} events"
    )


@script_command("Snapshot file to write (default: memlens-sim-<script>.<pid>.pickle).")
@click.option(
    "--device-memory",
    metavar="SIZE",
    default=None,
    help="GPU memory to simulate, e.g. 80GiB; beyond it the script gets "
    "torch.OutOfMemoryError and the trace an `oom` entry. Default: unlimited.",
)
@click.option(
    "--max-entries",
    type=click.IntRange(min=1),
    default=None,
    help="Keep only the newest N trace entries (default: all).",
)
@click.option(
    "--stacks",
    type=click.Choice(["python", "all", "none"]),
    default="python",
    show_default=True,
    help="Python frames on each entry ('all' = 'python' here: there are no C++ frames to record).",
)
@click.option(
    "--expandable-segments/--no-expandable-segments",
    default=None,
    help="Model PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.",
)
@click.option(
    "--max-split-size-mb", type=click.IntRange(min=1), default=None, help="Model max_split_size_mb."
)
@click.option(
    "--roundup-power2-divisions",
    type=click.IntRange(min=1),
    default=None,
    help="Model roundup_power2_divisions (one value for every size).",
)
@click.option(
    "--gpu",
    metavar="NAME",
    default=None,
    help="Card or generation to simulate: h100/hopper (default), a100/ampere, a100-40gb, "
    "a10, l4/ada, rtx4090, v100/volta, t4/turing. Sets the cuBLAS workspace, the device "
    "memory (unless --device-memory) and what torch.cuda answers.",
)
@click.option(
    "--cublas-workspace",
    default=None,
    metavar="SIZE",
    help="cuBLAS workspace per thread (default from --gpu: 32MiB from Hopper on, "
    "8519680 bytes before; 0 to omit).",
)
@click.option(
    "--nvtx-annotations/--no-nvtx-annotations",
    default=True,
    show_default=True,
    help="Write torch.cuda.nvtx ranges as annotations, like record_function.",
)
@click.option(
    "--early-stacks",
    is_flag=True,
    help="Keep the stacks of blocks allocated before the script switched history on "
    "(the GPU recorder has none for them).",
)
def command(
    output: Path | None,
    device_memory: str | None,
    max_entries: int | None,
    stacks: str,
    expandable_segments: bool | None,
    max_split_size_mb: int | None,
    roundup_power2_divisions: int | None,
    gpu: str | None,
    cublas_workspace: str | None,
    nvtx_annotations: bool,
    early_stacks: bool,
    script: str,
    args: tuple[str, ...],
) -> None:
    """Run SCRIPT as __main__ with fake CUDA tensors and a model of PyTorch's caching
    allocator, then write the snapshot a GPU run would have recorded: the script's own
    last torch.cuda.memory._dump_snapshot when it makes one (same window, same state),
    else the whole run. Settings not given come from $PYTORCH_CUDA_ALLOC_CONF."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MemlensError("memlens simulate needs PyTorch: pip install torch") from None
    from memlens.simulation.api import run_script
    from memlens.simulation.gpus import gpu_preset
    from memlens.simulation.script import ScriptFailed

    card = gpu_preset(gpu)
    workspace = card.cublas_workspace if cublas_workspace is None else cublas_workspace
    memory = device_memory or (f"{card.memory} bytes" if gpu else "unlimited")
    status(
        f"memlens: simulating {card.name} (sm {card.capability[0]}.{card.capability[1]}): "
        f"cuBLAS workspace {workspace} bytes per thread, device memory {memory}"
        + ("" if gpu else "; --gpu NAME for another card"),
        err=True,
    )
    output = output or _default_output(script)
    try:
        run = run_script(
            script,
            list(args),
            output,
            device_memory=device_memory,
            max_entries=max_entries,
            stacks=None if stacks == "none" else "python",
            expandable_segments=expandable_segments,
            max_split_size_mb=max_split_size_mb,
            roundup_power2_divisions=roundup_power2_divisions,
            gpu=gpu,
            cublas_workspace=cublas_workspace,
            nvtx_annotations=nvtx_annotations,
            early_stacks=early_stacks,
        )
    except ScriptFailed as failed:
        if failed.traceback:
            status(failed.traceback.rstrip("\n"), err=True)
        status(f"memlens: {failed}", err=True)
        click.get_current_context().exit(1)
    for note in run.notes:
        status(f"memlens: note: {note}", err=True)
    if run.own_dump:
        status(
            f"memlens: the script dumped its own snapshot ({run.sim.dumps[-1]}); "
            f"{output} is the same window and state",
            err=True,
        )
    status(f"memlens: simulated snapshot written to {output}", err=True)
    status(_summary(output), err=True)
    status(f"memlens: view it with: memlens view {output}", err=True)
    if run.oom is not None:
        status(f"memlens: the script ran out of memory: {run.oom}", err=True)
        click.get_current_context().exit(1)

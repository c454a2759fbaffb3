"""`memlens simulate script.py [args...]`: run CUDA code without a GPU, write its snapshot."""

from __future__ import annotations

import os
from pathlib import Path

import click

from memlens.cli.options import script_command
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
    "--cublas-workspace",
    default="32MiB",
    show_default=True,
    metavar="SIZE",
    help="cuBLAS workspace per thread (8.125MiB before Hopper; 0 to omit).",
)
def command(
    output: Path | None,
    device_memory: str | None,
    max_entries: int | None,
    stacks: str,
    expandable_segments: bool | None,
    max_split_size_mb: int | None,
    roundup_power2_divisions: int | None,
    cublas_workspace: str,
    script: str,
    args: tuple[str, ...],
) -> None:
    """Run SCRIPT as __main__ with fake CUDA tensors and a model of PyTorch's caching
    allocator, then write the snapshot a GPU run would have recorded. Settings not given
    come from $PYTORCH_CUDA_ALLOC_CONF."""
    try:
        import torch
    except ImportError:
        raise MemlensError("memlens simulate needs PyTorch: pip install torch") from None
    from memlens.simulation.api import run_script

    output = output or _default_output(script)
    options = dict(
        output=output,
        device_memory=device_memory,
        max_entries=max_entries,
        stacks=None if stacks == "none" else "python",
        expandable_segments=expandable_segments,
        max_split_size_mb=max_split_size_mb,
        roundup_power2_divisions=roundup_power2_divisions,
        cublas_workspace=cublas_workspace,
    )
    failed = None
    try:
        run_script(script, list(args), **options)
    except torch.OutOfMemoryError as oom:
        failed = oom
    click.echo(f"memlens: simulated snapshot written to {output}", err=True)
    click.echo(_summary(output), err=True)
    click.echo(f"memlens: view it with: memlens view {output}", err=True)
    if failed is not None:
        click.echo(f"memlens: the script ran out of memory: {failed}", err=True)
        click.get_current_context().exit(1)

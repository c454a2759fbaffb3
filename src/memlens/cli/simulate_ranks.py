"""`memlens simulate --nproc-per-node N SCRIPT`: every picked rank simulated, one snapshot
per rank in a directory, a per-rank table (peaks, headroom on the card) and `memlens
fleet`'s comparison of the ranks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from memlens.cli.options import status
from memlens.units import format_bytes

if TYPE_CHECKING:
    from memlens.fleet.launch import RankResult
    from memlens.simulation.config import SimulateConfig


def default_directory(script: str) -> Path:
    name = script.rpartition(".")[2] if not script.endswith(".py") else Path(script).stem
    return Path(f"memlens-sim-{name}.{os.getpid()}")


def rank_table(results: list[RankResult], device_memory: int | None) -> str:
    """One line per rank: peak active, peak reserved, headroom on the card (when its
    memory is known), and the rank with the largest reserved peak named."""
    rows = [("rank", "peak active", "peak reserved", "headroom", "")]
    for r in results:
        if r.error is not None or r.peak_reserved is None or r.peak_active is None:
            rows.append((str(r.rank), "-", "-", "-", f"failed: {r.error}"))
            continue
        headroom = "-" if device_memory is None else format_bytes(device_memory - r.peak_reserved)
        note = "OOM" if r.oom is not None else ""
        rows.append(
            (
                str(r.rank),
                format_bytes(r.peak_active),
                format_bytes(r.peak_reserved),
                headroom,
                note,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  ".join(cell.rjust(w) for cell, w in zip(row[:4], widths, strict=True)) + f"  {row[4]}"
        for row in rows
    ]
    ok = [r for r in results if r.peak_reserved is not None]
    if ok:
        top = max(ok, key=lambda r: (r.peak_reserved or 0, -r.rank))
        lines.append(
            f"largest: rank {top.rank}, peak reserved {format_bytes(top.peak_reserved or 0)}"
        )
    return "\n".join(line.rstrip() for line in lines)


def launch(
    script: str,
    args: list[str],
    output: Path | None,
    *,
    nproc_per_node: int,
    nnodes: int,
    ranks: str | None,
    scheduler: str | None,
    workers: int | None,
    module: bool,
    whole_run: bool,
    config: SimulateConfig,
) -> int:
    """Run the ranks, print the table and the fleet comparison; the exit status (1 when
    a rank failed or ran out of memory)."""
    from memlens.fleet.api import run as fleet_run
    from memlens.fleet.launch import simulate_ranks
    from memlens.simulation.distributed.env import World
    from memlens.views.text.fleet import render_fleet

    world = World(nproc_per_node, nnodes)
    picked = world.pick(ranks)
    directory = output or default_directory(script)
    status(
        f"memlens: simulating {len(picked)} of {world.size} rank"
        f"{'' if world.size == 1 else 's'} ({nnodes} node{'' if nnodes == 1 else 's'} x "
        f"{nproc_per_node}) into {directory}/",
        err=True,
    )

    def heard(r: RankResult) -> None:
        if r.error is not None:
            if r.traceback:
                status(r.traceback.rstrip("\n"), err=True)
            status(f"memlens: rank {r.rank}: {r.error}", err=True)

    results = simulate_ranks(
        script,
        args,
        directory,
        world,
        picked,
        config=config,
        module=module,
        whole_run=whole_run,
        scheduler=scheduler,
        workers=workers,
        on_result=heard,
    )
    notes = dict.fromkeys(n for r in results for n in r.notes)
    for note in notes:
        status(f"memlens: note: {note}", err=True)
    click.echo(rank_table(results, config.device_memory_bytes()))
    written = [r.output for r in results if r.output is not None]
    if len(written) > 1:
        fleet = fleet_run(written, scheduler=scheduler, workers=workers, progress=None)
        click.echo(render_fleet(fleet))
    status(f"memlens: compare the ranks with: memlens fleet {directory}", err=True)
    failed = any(r.error is not None or r.oom is not None for r in results)
    return 1 if failed else 0

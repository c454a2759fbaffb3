"""`memlens simulate --nproc-per-node N SCRIPT`: every picked rank simulated, one snapshot
per rank in a directory, a per-rank table (peaks, headroom on the card) and `memlens
fleet`'s comparison of the ranks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import click

from memlens.cli.options import script_name, status
from memlens.simulation.distributed.env import format_ranks
from memlens.units import format_bytes

if TYPE_CHECKING:
    from memlens.simulation.config import SimulateConfig
    from memlens.simulation.distributed.launch import RankResult
    from memlens.simulation.script import ScriptTarget


def default_directory(script: str) -> Path:
    return Path(f"memlens-sim-{script_name(script)}.{os.getpid()}")


def _figures(r: RankResult, device_memory: int | None) -> tuple[str, str, str]:
    assert r.peak_active is not None and r.peak_reserved is not None
    headroom = "-" if device_memory is None else format_bytes(device_memory - r.peak_reserved)
    return format_bytes(r.peak_active), format_bytes(r.peak_reserved), headroom


def rank_table(
    results: list[RankResult],
    device_memory: int | None,
    assumed: list[int] | None = None,
    symmetric: bool | None = None,
) -> str:
    """One line per simulated rank: peak active, peak reserved, headroom on the card
    (when its memory is known), and the rank with the largest reserved peak named; then
    one line for the ranks left out (`assumed`): rank 0's figures when the job looked
    `symmetric`, none otherwise, and in words that they were not simulated."""
    rows = [("rank", "peak active", "peak reserved", "headroom", "")]
    first = results[0] if results else None
    for r in results:
        if r.error is not None or r.peak_reserved is None or r.peak_active is None:
            rows.append((str(r.rank), "-", "-", "-", f"failed: {r.error}"))
            continue
        rows.append((str(r.rank), *_figures(r, device_memory), "OOM" if r.oom is not None else ""))
    if assumed:
        if symmetric and first is not None:
            rows.append(
                (format_ranks(assumed), *_figures(first, device_memory),
                 f"not simulated: assumed equal to rank {first.rank}"
                 + (", OOM" if first.oom is not None else ""))
            )  # fmt: skip
        else:
            rows.append((format_ranks(assumed), "-", "-", "-", "not simulated"))
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
            + (" (of the simulated ranks)" if assumed and not symmetric else "")
        )
    return "\n".join(line.rstrip() for line in lines)


def symmetry(results: list[RankResult]) -> bool | None:
    """Whether the probed ranks (rank 0 and the last) ran the same allocations: True,
    False, or None when one of them failed (nothing to compare)."""
    shapes = [r.shape for r in results]
    if any(shape is None for shape in shapes):
        return None
    return all(shape == shapes[0] for shape in shapes)


def _symmetry_note(results: list[RankResult], assumed: list[int], verdict: bool | None) -> str:
    probed = " and ".join(str(r.rank) for r in results)
    left = format_ranks(assumed)
    if verdict:
        return (
            f"memlens: ranks {probed} ran the same allocations (same sizes in the same "
            f"order, same peaks): the job looks symmetric, so ranks {left} were not "
            f"simulated and are assumed equal to rank {results[0].rank}; "
            "simulate every rank with --ranks all"
        )
    if verdict is None:
        return (
            f"memlens: warning: ranks {left} were not simulated, and whether they equal "
            f"rank {results[0].rank} is unknown (a probed rank failed); "
            "simulate them with --ranks all"
        )
    a, b = results[0], results[-1]
    how = (
        f"peak reserved {format_bytes(a.peak_reserved or 0)} against "
        f"{format_bytes(b.peak_reserved or 0)}, peak active "
        f"{format_bytes(a.peak_active or 0)} against {format_bytes(b.peak_active or 0)}"
        if (a.peak_active, a.peak_reserved) != (b.peak_active, b.peak_reserved)
        else "same peaks, but different allocations"
    )
    return (
        f"memlens: warning: ranks {probed} differ ({how}): the job is not symmetric, and "
        f"ranks {left} were not simulated; simulate them with --ranks all (or --ranks LIST)"
    )


def launch(
    target: ScriptTarget,
    output: Path | None,
    *,
    nproc_per_node: int,
    nnodes: int,
    ranks: str | None,
    scheduler: str | None,
    workers: int | None,
    config: SimulateConfig,
) -> int:
    """Run the ranks, print the table and the fleet comparison; the exit status (1 when
    a rank failed or ran out of memory). Without `ranks`, rank 0 and the last one are
    simulated and the others assumed equal to rank 0 when those two match."""
    from memlens.fleet.api import run as fleet_run
    from memlens.simulation.distributed.env import World
    from memlens.simulation.distributed.launch import simulate_ranks
    from memlens.views.text.fleet import render_fleet

    world = World(nproc_per_node, nnodes)
    picked = world.probe() if ranks is None else world.pick(ranks)
    assumed = [r for r in range(world.size) if r not in picked] if ranks is None else []
    directory = output or default_directory(target.script)
    status(
        f"memlens: simulating {len(picked)} of {world.size} rank"
        f"{'' if world.size == 1 else 's'} ({nnodes} node{'' if nnodes == 1 else 's'} x "
        f"{nproc_per_node}) into {directory}/"
        + (
            f": ranks {format_ranks(picked)}, to see whether the job is symmetric "
            "(every rank with --ranks all)"
            if assumed
            else ""
        ),
        err=True,
    )

    def heard(r: RankResult) -> None:
        if r.error is not None:
            if r.traceback:
                status(r.traceback.rstrip("\n"), err=True)
            status(f"memlens: rank {r.rank}: {r.error}", err=True)

    results = simulate_ranks(
        target,
        directory,
        world,
        picked,
        config=config,
        scheduler=scheduler,
        workers=workers,
        on_result=heard,
    )
    notes = dict.fromkeys(n for r in results for n in r.notes)
    for note in notes:
        status(f"memlens: note: {note}", err=True)
    verdict = symmetry(results) if assumed else None
    click.echo(rank_table(results, config.device_memory_bytes(), assumed, verdict))
    failed = [r.rank for r in results if r.error is not None]
    if len(failed) == len(results):
        # nothing to compare: no hint at `memlens fleet`, an error instead
        status(
            f"memlens: error: {'the' if len(failed) == 1 else 'all'} {len(failed)} simulated "
            f"rank{'' if len(failed) == 1 else 's'} failed ({format_ranks(failed)}): nothing "
            "to compare; their errors are above",
            err=True,
        )
        return 1
    written = [r.output for r in results if r.output is not None]
    if len(written) > 1:
        fleet = fleet_run(written, scheduler=scheduler, workers=workers, progress=None)
        click.echo(render_fleet(fleet))
    if assumed:
        status(_symmetry_note(results, assumed, verdict), err=True)
    if failed:
        status(
            f"memlens: warning: {len(failed)} of {len(results)} simulated ranks FAILED "
            f"({format_ranks(failed)}; their errors above): the table and the comparison "
            "leave them out",
            err=True,
        )
    status(f"memlens: compare the ranks with: memlens fleet {directory}", err=True)
    oom = any(r.oom is not None for r in results)
    return 1 if failed or oom else 0

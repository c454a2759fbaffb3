"""`memlens fleet PATHS...`: one snapshot per rank, read in parallel (a local process pool
or a Dask cluster), then which ranks differ, how, and why."""

from __future__ import annotations

import click

from memlens.cli.options import (
    device_option,
    emit_json,
    hide_option,
    hide_patterns,
    json_option,
    no_cache_option,
)


@click.command("fleet")
@click.argument("paths", metavar="PATHS...", nargs=-1, required=True)
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT|dask-local",
              help="Run on a Dask cluster: the address of an existing scheduler, or "
              "dask-local to start a LocalCluster (needs memlens[fleet]). Default: a local "
              "process pool.")  # fmt: skip
@click.option("--workers", type=int, default=None,
              help="Processes of the local pool or the LocalCluster (default: the cores).")  # fmt: skip
@click.option("--rank-regex", default=None, metavar="REGEX",
              help="Rank id from the file name: the regex's first group, a number "
              "(default: rank12, rank_12, ..._12.pickle; else the order given).")  # fmt: skip
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="Also write the per-rank table as Parquet (needs pyarrow).")  # fmt: skip
@click.option("--z", "threshold", type=float, default=3.5, show_default=True,
              help="|robust z| above which a figure makes a rank an outlier.")  # fmt: skip
@click.option("--tolerance", type=float, default=0.05, show_default=True,
              help="Ranks group together within this fraction of the median.")  # fmt: skip
@click.option("--diffs", type=int, default=10, show_default=True,
              help="How many outliers get a diff against the median rank.")  # fmt: skip
@click.option("--top", type=int, default=10, show_default=True,
              help="Call sites at the peak kept per rank.")  # fmt: skip
@device_option(help="Device of each file (default: the longest trace).")
@json_option
@no_cache_option
@hide_option
def command(
    paths: tuple[str, ...],
    scheduler: str | None,
    workers: int | None,
    rank_regex: str | None,
    out: str | None,
    threshold: float,
    tolerance: float,
    diffs: int,
    top: int,
    device: int | None,
    as_json: bool,
    no_cache: bool,
    hide: tuple[str, ...],
) -> None:
    """Compare ranks: per rank (in parallel) peak, baseline, end, OOMs, stage peaks,
    categories and top sites at the peak; across ranks, outliers by robust z-score with
    a diff against the median rank, groups, and the imbalance of each stage.

    PATHS are files, directories or globs. A file that cannot be read is a failed row.
    """
    from memlens.errors import MemlensError
    from memlens.fleet.api import fleet
    from memlens.views.text.fleet import render_fleet

    if threshold <= 0 or tolerance < 0 or diffs < 0 or top < 0:
        raise MemlensError("--z must be > 0; --tolerance, --diffs and --top >= 0")
    result = fleet(
        list(paths),
        scheduler=scheduler,
        workers=workers,
        rank_regex=rank_regex,
        device=device,
        top=top,
        hide_patterns=hide_patterns(hide),
        cache=not no_cache,
        threshold=threshold,
        tolerance=tolerance,
        diffs=diffs,
        progress=None,
    )
    if out is not None:
        from memlens.fleet.table import write_parquet

        write_parquet(result, out)
    if as_json:
        emit_json(result)
    else:
        click.echo(render_fleet(result))
    if out is not None:
        click.echo(f"wrote {out} ({len(result['table']):,} rows)", err=True)

"""`memlens fleet PATHS...`: one snapshot per rank, read in parallel (a local process pool
or a Dask cluster), then which ranks differ, how, and why."""

from __future__ import annotations

from typing import Any

import click

from memlens.cli.command import Answer, analysis_command
from memlens.cli.options import FINITE, status, write_page
from memlens.fleet.results import FleetResult


def _check(**own: Any) -> dict[str, Any]:
    import os

    from memlens.errors import MemlensError

    if own["threshold"] <= 0 or own["tolerance"] < 0 or own["diffs"] < 0 or own["top"] < 0:
        raise MemlensError("--z must be > 0; --tolerance, --diffs and --top >= 0")
    if own["workers"] is not None:
        if own["workers"] < 1:
            raise MemlensError("--workers must be at least 1")
        # more processes than cores only costs memory (60 gave 62 processes, 2.4 GB)
        own["workers"] = min(own["workers"], os.cpu_count() or 1)
    return own


@analysis_command(
    "fleet",
    click.option("--scheduler", default=None, metavar="tcp://HOST:PORT|dask-local",
                 help="Run on a Dask cluster: the address of an existing scheduler, or "
                 "dask-local to start a LocalCluster (needs memlens[fleet]). Default: a "
                 "local process pool."),
    click.option("--workers", type=int, default=None,
                 help="Processes of the local pool or the LocalCluster (default and at most: "
                 "the cores)."),
    click.option("--rank-regex", default=None, metavar="REGEX",
                 help="Rank id from the file name: the regex's first group, a number "
                 "(default: rank12, rank_12, ..._12.pickle; else the order given)."),
    click.option("--out", type=click.Path(dir_okay=False), default=None,
                 help="Also write the per-rank table as Parquet (needs pyarrow)."),
    click.option("--report", type=click.Path(dir_okay=False), default=None,
                 help="Also write an HTML report: rank x stage heatmap, outliers and "
                 "their diffs, groups, stages."),
    click.option("--z", "threshold", type=FINITE, default=3.5, show_default=True,
                 help="|robust z| above which a figure makes a rank an outlier."),
    click.option("--tolerance", type=FINITE, default=0.05, show_default=True,
                 help="Ranks group together within this fraction of the median."),
    click.option("--diffs", type=int, default=10, show_default=True,
                 help="How many outliers get a diff against the median rank."),
    click.option("--top", type=int, default=10, show_default=True,
                 help="Call sites at the peak kept per rank."),
    opens="paths",
    device_help="Device of each file (default: the longest trace).",
    prepare=_check,
)  # fmt: skip
def command(
    inputs: tuple[str, ...],
    out: str | None,
    report: str | None,
    no_cache: bool,
    hide: list[str] | None,
    **relayed: Any,
) -> Answer[FleetResult]:
    """Compare ranks: per rank (in parallel) peak, baseline, end, OOMs, stage peaks,
    categories and top sites at the peak; across ranks, outliers by robust z-score with
    a diff against the median rank, groups, and the imbalance of each stage.

    PATHS are files, directories or globs (made absolute before they are sent to the
    workers). A file that cannot be read is a failed row: a warning on stderr names how
    many and why, and the exit status is 1 when every rank failed.
    """
    from memlens.fleet.api import run
    from memlens.views.text.fleet import failure_warning, render_fleet

    # scheduler, workers, rank_regex, threshold, tolerance, diffs, top and device are
    # run()'s own parameters, under the same names
    result = run(list(inputs), hide_patterns=hide, cache=not no_cache, progress=None, **relayed)
    if out is not None:
        from memlens.fleet.table import write_parquet

        write_parquet(result, out)
        status(f"wrote {out} ({len(result['table']):,} rows)", err=True)
    if report is not None:
        from memlens.views.report.fleet import fleet_report

        write_page(report, fleet_report(result))
        status(f"wrote {report}", err=True)
    warning = failure_warning(result)
    if warning is not None:
        status(warning, err=True)
    # every rank failed: the answer is printed (--json has the reasons) but the exit
    # status says there was nothing to compare
    return Answer(result, render_fleet, exit_code=1 if result["ranks_ok"] == 0 else 0)

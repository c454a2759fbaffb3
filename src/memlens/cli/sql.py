"""`memlens sql SNAP "select ..."`: SQL over the snapshot's tables (DuckDB; docs/sql.md)."""

from __future__ import annotations

import click

from memlens.cli.options import (
    emit_json,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
    status,
)


@click.command("sql")
@snapshot_argument
@click.argument("query", required=False)
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (header + rows).")
@click.option(
    "--top", type=int, default=None, help="Print at most this many rows (table view: 1000)."
)
# --limit was the other name of "how many" (and the group's --limit NAME=N is another thing)
@click.option("--limit", "limit_alias", type=int, default=None, hidden=True)
@click.option(
    "--tables", "show_tables", is_flag=True, help="List the tables and their columns, then exit."
)
@click.option(
    "--allow-files",
    is_flag=True,
    help="Let the query read and write files (read_csv, COPY, ATTACH...); off by default.",
)
@json_option
@no_cache_option
def command(
    snapshot: str,
    query: str | None,
    as_csv: bool,
    top: int | None,
    limit_alias: int | None,
    show_tables: bool,
    allow_files: bool,
    as_json: bool,
    no_cache: bool,
) -> None:
    """Run a SQL QUERY (DuckDB dialect) over the snapshot: events, allocations, frames,
    stacks, stack_frames, segments, blocks, annotations, strings.

    \b
    memlens sql step.pickle "select action, count(*) from events group by 1"
    """
    from memlens.analysis.sql import TABLES_QUERY
    from memlens.analysis.sql import query as run
    from memlens.errors import MemlensError

    if limit_alias is not None:
        status("memlens: warning: --limit N is deprecated; use --top N", err=True)
        top = limit_alias if top is None else top
    if not query and not show_tables:
        raise MemlensError(
            'give a query, e.g. "select action, count(*) from events group by 1", or --tables'
        )
    snap = open_snapshot(snapshot, no_cache)
    sql = TABLES_QUERY if show_tables else query
    assert sql is not None  # given, or the --tables query
    if top is None and not (as_json or as_csv):
        top = 1000  # the table view's default
    result = run(snap, sql, top=top, allow_files=allow_files)
    if as_json:
        emit_json(result)
        return
    from memlens.views.text.sql import print_csv, print_table

    (print_csv if as_csv else print_table)(result, result["rows"])

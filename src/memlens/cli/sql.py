"""`memlens sql SNAP "select ..."`: SQL over the snapshot's tables (DuckDB; docs/sql.md)."""

from __future__ import annotations

from typing import Any

import click

from memlens.cli.options import (
    emit_json,
    json_option,
    no_cache_option,
    open_snapshot,
    snapshot_argument,
)


def _plain(v: Any) -> Any:
    """DuckDB values -> JSON-able (HUGEINT is already int; DECIMAL -> float; others -> str)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    try:
        from decimal import Decimal

        if isinstance(v, Decimal):
            return float(v)
    except ImportError:  # pragma: no cover
        pass
    return str(v)


@click.command("sql")
@snapshot_argument
@click.argument("query", required=False)
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (header + rows).")
@click.option(
    "--limit", type=int, default=None, help="Print at most this many rows (table view: 1000)."
)
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
def command(snapshot: str, query: str | None, as_csv: bool, limit: int | None, show_tables: bool,
            allow_files: bool, as_json: bool, no_cache: bool) -> None:  # fmt: skip
    """Run a SQL QUERY (DuckDB dialect) over the snapshot: events, allocations, frames,
    stacks, stack_frames, segments, blocks, annotations, strings.

    \b
    memlens sql step.pickle "select action, count(*) from events group by 1"
    """
    from memlens.analysis.sql import query as run
    from memlens.errors import MemlensError

    if not query and not show_tables:
        raise MemlensError(
            'give a query, e.g. "select action, count(*) from events group by 1", or --tables'
        )
    snap = open_snapshot(snapshot, no_cache)
    if show_tables:
        query = (
            "select table_name, string_agg(column_name || ' ' || data_type, ', ' order by ordinal_position) "
            "as columns from information_schema.columns where table_name not like '\\_%' escape '\\' "
            "group by 1 order by 1"
        )
    assert query is not None  # given, or the --tables query
    if as_json or as_csv:
        result = run(snap, query, limit=limit, allow_files=allow_files)
    else:
        limit = limit if limit is not None else 1000
        result = run(snap, query, limit=limit, allow_files=allow_files)
    rows = [[_plain(v) for v in r] for r in result["rows"]]
    if as_json:
        emit_json({**result, "rows": rows})
        return
    from memlens.views.text.sql import print_csv, print_table

    (print_csv if as_csv else print_table)(result, rows)

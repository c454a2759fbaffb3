"""Text of `memlens sql`: a table (rich, numbers right-aligned) or CSV on stdout."""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from typing import Any

from memlens.analysis.results import QueryResult

_NUMERIC = ("INT", "DOUBLE", "FLOAT", "DECIMAL")


def print_table(result: QueryResult, rows: Sequence[Sequence[Any]]) -> None:
    """`rows`: the result's rows as plain Python values (NULL is None)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    for c, t in zip(result["columns"], result["types"]):
        table.add_column(c, justify="right" if any(k in t for k in _NUMERIC) else "left")
    for r in rows:
        table.add_row(*["NULL" if v is None else str(v) for v in r])
    console = Console()
    console.print(table)
    more = " (more rows not shown: --top N, --csv or --json)" if result["truncated"] else ""
    console.print(f"{len(rows):,} rows{more}", style="dim")


def print_csv(result: QueryResult, rows: Sequence[Sequence[Any]]) -> None:
    """A header line, then one line per row (NULL is empty)."""
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(result["columns"])
    w.writerows(rows)

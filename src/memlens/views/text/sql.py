"""Text of `memlens sql`: a table (rich, numbers right-aligned) or CSV on stdout."""

from __future__ import annotations

import csv
import sys
from collections.abc import Sequence
from typing import Any

from memlens.analysis.results import QueryResult
from memlens.views.escape import visible

_NUMERIC = ("INT", "DOUBLE", "FLOAT", "DECIMAL")


def print_table(result: QueryResult, rows: Sequence[Sequence[Any]]) -> None:
    """`rows`: the result's rows as plain Python values (NULL is None)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(show_lines=False, header_style="bold")
    for c, t in zip(result["columns"], result["types"]):
        justify = "right" if any(k in t for k in _NUMERIC) else "left"
        table.add_column(Text(visible(str(c))), justify=justify)  # type: ignore[arg-type]
    for r in rows:  # literal text (no markup), control characters as escapes
        table.add_row(*[Text("NULL" if v is None else visible(str(v))) for v in r])
    console = Console()
    console.print(table)
    more = " (more rows not shown: --top N, --csv or --json)" if result["truncated"] else ""
    console.print(f"{len(rows):,} rows{more}", style="dim")


def print_csv(result: QueryResult, rows: Sequence[Sequence[Any]]) -> None:
    """A header line, then one line per row (NULL is empty); text with control characters
    (and lone surrogates, which stdout cannot encode) shows them as escapes."""
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow([visible(str(c)) for c in result["columns"]])
    w.writerows([visible(v) if isinstance(v, str) else v for v in r] for r in rows)

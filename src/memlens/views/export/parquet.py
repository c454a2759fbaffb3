"""The tables of `memlens sql` as Parquet files (`memlens export --parquet DIR`).

The tables are exactly the ones a query sees: analysis.sql.connect registers them (and its
views that resolve names: frames, annotations, stack_frames), and each is read back
through DuckDB into Arrow, so the files and `memlens sql` can never disagree.
"""

from __future__ import annotations

from pathlib import Path

from memlens.analysis.sql import TABLES, connect
from memlens.errors import MemlensError
from memlens.snapshot.model import Snapshot


def write_parquet(snap: Snapshot, directory: str | Path) -> list[Path]:
    """DIR/<table>.parquet for each table of `memlens sql`; returns the files written."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MemlensError("Parquet export needs PyArrow: pip install 'memlens[sql]'") from None
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MemlensError(f"cannot create {out}: {exc.strerror or exc}") from None
    con = connect(snap)
    written = []
    for name in TABLES:
        rel = con.sql(f"SELECT * FROM {name}")
        # DuckDB 2 calls it to_arrow_table; 1.x, arrow()
        fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
        table = fetch()
        path = out / f"{name}.parquet"
        try:
            pq.write_table(table, path)
        except OSError as exc:
            raise MemlensError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    return written

"""The fleet's per-rank table as flat columns, written as Parquet (`--out`).

One row per rank (failed rows too): the headline figures, one column per stage peak
("stage.<name>.peak_bytes") and per category at the peak ("category.<name>.bytes"), the
group, the outlier flag and the largest |z|. Nested values (top sites, OOM entries) are
in the JSON; here the OOM count stands for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError
from memlens.fleet.record import SUMMARY_FIGURES
from memlens.fleet.results import FleetResult, FleetRow

_FIXED: tuple[tuple[str, str], ...] = (
    ("rank", "int64"), ("path", "string"), ("status", "string"), ("reason", "string"),
    ("device", "int64"), *((k, "int64") for k in SUMMARY_FIGURES), ("ooms", "int64"),
    ("fingerprint", "string"), ("group", "int64"), ("outlier", "bool"),
    ("max_abs_z", "float64"), ("worker", "string"),
)  # fmt: skip


def flat_rows(table: Sequence[FleetRow]) -> tuple[list[dict[str, Any]], list[str]]:
    """(rows as flat dicts, the stage/category column names in order)."""
    stages = sorted({k for row in table for k in row["stage_peaks"]})
    cats = sorted({k for row in table for k in row["category_bytes"]})
    extra = [f"stage.{s}.peak_bytes" for s in stages] + [f"category.{c}.bytes" for c in cats]
    rows = []
    for row in table:
        values: dict[str, Any] = dict(row)
        flat = {k: values[k] for k, _ in _FIXED if k not in ("ooms", "max_abs_z")}
        flat["ooms"] = len(row["ooms"])
        flat["max_abs_z"] = max((abs(z) for z in row["z"].values()), default=None)
        flat.update({f"stage.{s}.peak_bytes": row["stage_peaks"].get(s) for s in stages})
        flat.update({f"category.{c}.bytes": row["category_bytes"].get(c) for c in cats})
        rows.append(flat)
    return rows, extra


def write_parquet(result: FleetResult, path: str | Path) -> Path:
    """The table of a fleet result as one Parquet file (needs pyarrow: memlens[fleet])."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise MemlensError("--out needs pyarrow: pip install 'memlens[fleet]'") from None
    rows, extra = flat_rows(result["table"])
    schema = pa.schema(
        [*(pa.field(k, t) for k, t in _FIXED), *(pa.field(k, "int64") for k in extra)]
    )
    table = pa.Table.from_pylist(rows, schema=schema)
    out = Path(path)
    try:
        pq.write_table(table, out)
    except OSError as exc:
        raise MemlensError(f"cannot write {out}: {exc}") from None
    return out

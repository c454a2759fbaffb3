"""`memlens export`'s text: one line per file written, then any warning."""

from __future__ import annotations

from memlens.analysis.results import ExportResult
from memlens.units import format_bytes


def render_export(result: ExportResult) -> str:
    lines = []
    for o in result["outputs"]:
        what = f"{len(o['files'])} tables" if o["format"] == "parquet" else o["format"]
        lines.append(f"wrote {o['path']} ({what}, {format_bytes(o['bytes'])})")
    if result["merged_into"] is not None:  # the profiler's file itself is left as it was
        lines.append(
            f"with {result['merged_into']}'s events, unchanged, and the memory tracks "
            f"(ts = time_us - {result['clock_base_us']})"
        )
    lines += [f"warning: {w}" for w in result["warnings"]]
    return "\n".join(lines)

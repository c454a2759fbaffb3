"""`memlens export`: every requested output written, and what was written (ExportResult)."""

from __future__ import annotations

from pathlib import Path

from memlens.analysis.results import ExportFormat, ExportOutput, ExportResult
from memlens.errors import MemlensError
from memlens.snapshot.model import Snapshot


def _output(fmt: ExportFormat, path: Path, files: list[Path]) -> ExportOutput:
    return {
        "format": fmt,
        "path": str(path),
        "bytes": sum(f.stat().st_size for f in files),
        "files": [str(f) for f in files],
    }


def export(
    snap: Snapshot,
    *,
    chrome_trace: Path | None = None,
    merge: Path | None = None,
    snapshot_json: Path | None = None,
    parquet: Path | None = None,
    devices: list[int] | None = None,
) -> ExportResult:
    from memlens.views.export import chrome_trace as ct

    result: ExportResult = {
        "source": snap.source,
        "outputs": [],
        "merged_into": None,
        "clock_base_us": 0,
        "warnings": [],
    }
    try:
        if chrome_trace is not None:
            if merge is not None:
                profile = ct.read_trace(merge)
                trace, overlap = ct.merge(snap, profile, devices)
                result["merged_into"] = str(merge)
                result["clock_base_us"] = ct.profiler_base_us(profile)
                if not overlap:
                    result["warnings"].append(
                        f"the snapshot's time range does not overlap {merge}'s: "
                        "were they recorded in the same run?"
                    )
            else:
                trace = ct.chrome_trace(snap, devices)
            ct.write_trace(trace, chrome_trace)
            result["outputs"].append(_output("chrome-trace", chrome_trace, [chrome_trace]))
        if snapshot_json is not None:
            from memlens.snapshot.pytorch_layout import write_json

            write_json(snap, snapshot_json)
            result["outputs"].append(_output("snapshot-json", snapshot_json, [snapshot_json]))
        if parquet is not None:
            from memlens.views.export.parquet import write_parquet

            files = write_parquet(snap, parquet)
            result["outputs"].append(_output("parquet", parquet, files))
    except OSError as exc:
        raise MemlensError(f"cannot write {exc.filename}: {exc.strerror or exc}") from None
    return result

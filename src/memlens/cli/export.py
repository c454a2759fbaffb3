"""`memlens export SNAP --chrome-trace OUT [--merge TRACE] --snapshot-json OUT --parquet DIR`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from memlens.analysis.results import ExportResult
from memlens.cli.command import Answer, analysis_command
from memlens.errors import MemlensError
from memlens.snapshot.model import Snapshot

_OUT = click.Path(dir_okay=False, path_type=Path)


def _check(
    chrome_trace: Path | None, merge: Path | None, snapshot_json: Path | None, parquet: Path | None
) -> dict[str, Any]:
    """Fail before the load: nothing to write, or --merge without a trace to write."""
    if merge is not None and chrome_trace is None:
        raise MemlensError("--merge needs --chrome-trace OUT (the merged trace is written there)")
    if chrome_trace is None and snapshot_json is None and parquet is None:
        raise MemlensError("nothing to export: give --chrome-trace, --snapshot-json or --parquet")
    return {
        "chrome_trace": chrome_trace,
        "merge": merge,
        "snapshot_json": snapshot_json,
        "parquet": parquet,
    }


CHROME_TRACE = click.option(
    "--chrome-trace", type=_OUT, metavar="OUT",
    help="Write allocated/reserved counters and the stages as a Chrome trace (Perfetto).",
)  # fmt: skip
MERGE = click.option(
    "--merge", type=click.Path(dir_okay=False, exists=True, path_type=Path), metavar="TRACE",
    help="A torch.profiler Chrome trace to add the memory tracks to, on its clock "
    "(written to --chrome-trace OUT).",
)  # fmt: skip
SNAPSHOT_JSON = click.option(
    "--snapshot-json", type=_OUT, metavar="OUT",
    help="Write the whole snapshot as JSON in PyTorch's snapshot layout (memlens.load reads it).",
)  # fmt: skip
PARQUET = click.option(
    "--parquet", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
    help="Write the tables of `memlens sql` as DIR/<table>.parquet.",
)  # fmt: skip


@analysis_command(
    "export",
    CHROME_TRACE,
    MERGE,
    SNAPSHOT_JSON,
    PARQUET,
    opens="snapshot",
    hide=False,
    device_help="Device for the Chrome trace (default: every device with a trace).",
    prepare=_check,
)
def command(
    snap: Snapshot,
    chrome_trace: Path | None,
    merge: Path | None,
    snapshot_json: Path | None,
    parquet: Path | None,
    device: int | None,
) -> Answer[ExportResult]:
    """Write SNAPSHOT for other tools: a Chrome trace of its memory (alone or merged into
    a torch.profiler trace, for Perfetto), plain JSON, or Parquet tables."""
    from memlens.views.export.run import export
    from memlens.views.text.export import render_export

    result = export(
        snap,
        chrome_trace=chrome_trace,
        merge=merge,
        snapshot_json=snapshot_json,
        parquet=parquet,
        devices=None if device is None else [device],
    )
    return Answer(result, render_export)

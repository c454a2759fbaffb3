"""`memlens report SNAP [SNAP2] [--html report.html]`: one self-contained HTML file to share."""

from __future__ import annotations

import time
from pathlib import Path

import click

from memlens.analysis.sites import hide_patterns
from memlens.cli.options import (
    annotations_option,
    device_option,
    hide_option,
    no_cache_option,
    open_snapshot,
    snapshots_argument,
    status,
)
from memlens.errors import MemlensError


@click.command("report")
@snapshots_argument()
@click.option("-o", "--output", "--html", "output", type=click.Path(dir_okay=False), default=None,
              help="HTML file to write (default: SNAPSHOT's name with .html, in the current folder).")  # fmt: skip
@device_option
@click.option("--rules", "rules", type=click.Path(dir_okay=False), default=None,
              help="JSON or YAML file of custom rules (name: regex over frames) to add a rules section.")  # fmt: skip
@hide_option
@no_cache_option
@annotations_option
def command(
    paths: tuple[str, str | None],
    output: str | None,
    device: int | None,
    rules: str | None,
    hide: tuple[str, ...],
    hide_only: tuple[str, ...],
    no_cache: bool,
    annotation_files: tuple[str, ...],
) -> None:
    """Write a shareable HTML report: timeline, icicle of the peak, stages, categories,
    rules, leaks, OOMs, allocator settings, and the diff when SNAPSHOT2 is given.

    The file is self-contained (inline CSS, JS and SVG) and loads nothing from the network.
    """
    from memlens.views.report.build import build_report, default_output

    snapshot, snapshot2 = paths

    if rules is not None and not Path(rules).is_file():
        raise MemlensError(f"rules file not found: {rules}")
    # the current folder, not the snapshot's: that may be read-only or someone else's
    out = Path(output) if output else Path(default_output(snapshot).name)
    if out.resolve() == Path(snapshot).resolve() or (
        snapshot2 and out.resolve() == Path(snapshot2).resolve()
    ):
        raise MemlensError(f"refusing to overwrite the snapshot {out} with the report; pass -o")
    t0 = time.perf_counter()
    snap = open_snapshot(snapshot, no_cache, annotation_files, device)
    snap2 = open_snapshot(snapshot2, no_cache) if snapshot2 else None
    text, problems = build_report(
        snap,
        snap2,
        device=device,
        rules_path=rules,
        hide_patterns=hide_patterns(hide, hide_only),
        names=(snapshot, snapshot2),
    )
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise MemlensError(f"cannot write {out}: {exc.strerror or exc}") from None
    for p in problems:
        status(f"memlens: warning: report section {p}", err=True)
    size = len(text.encode("utf-8"))
    status(f"wrote {out} ({size / 1e6:.2f} MB in {time.perf_counter() - t0:.1f} s)")

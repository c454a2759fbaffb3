"""`memlens inspect-report RUN_DIR`: rebuild an inspector run's dashboard, plots and videos
from its saved statistics (after an interrupted run, or to change the video format)."""

from __future__ import annotations

from pathlib import Path

import click

from memlens.cli.options import status


@click.command("inspect-report")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option(
    "--videos/--no-videos", default=True, show_default=True, help="Write one video per tensor."
)
@click.option(
    "--plots/--no-plots", default=True, show_default=True, help="Write one PNG plot per tensor."
)
@click.option(
    "--format",
    "video_format",
    type=click.Choice(["auto", "mp4", "gif"]),
    default="auto",
    show_default=True,
    help="Video format; auto is MP4 when an encoder is available, else GIF.",
)
@click.option("--fps", type=click.IntRange(1, 60), default=8, show_default=True)
def command(run_dir: Path, videos: bool, plots: bool, video_format: str, fps: int) -> None:
    """Rebuild RUN_DIR/dashboard.html, plots/ and videos/ from the saved statistics."""
    from memlens.inspector.render import render_run
    from memlens.inspector.store import load_run

    run = load_run(run_dir)
    if not run.tensors:
        status(f"{run_dir}: no saved samples yet; writing an empty dashboard", err=True)
    result = render_run(run_dir, videos=videos, plots=plots, video_format=video_format, fps=fps)
    run_status = run.meta.get("status", "unknown")
    status(
        f"{len(run.tensors)} tensors, {sum(len(s) for s in run.tensors.values())} samples "
        f"(run status: {run_status}); {len(result['plots'])} plots, {len(result['videos'])} videos "
        f"in {result['seconds']:.1f}s"
    )
    status(f"dashboard: {result['dashboard']}")

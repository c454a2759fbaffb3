"""Rendering a run directory: the HTML dashboard, PNG plots and one video per tensor.

Everything is built from the saved files alone (``store.load_run``), so the background
process and ``memlens inspect-report`` share this code. Every output is written to a
temporary name and renamed into place, so an interrupted render never leaves a broken file.
Modules: ``colors`` (colour maps, images), ``svg`` (inline charts), ``dashboard`` (the HTML
page; its skeleton, CSS and script are in ``templates/``), ``plots`` (PNG), ``video``.
No torch here.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from memlens.inspector import store
from memlens.inspector.render.dashboard import write_dashboard
from memlens.inspector.render.plots import write_plots
from memlens.inspector.render.video import write_video
from memlens.inspector.store import Run

__all__ = ["render_run", "write_annotations"]


def write_annotations(run: Run) -> Path | None:
    if not run.activation_bytes:
        return None
    path = run.path / "annotations.json"
    store.atomic_write_json(path, store.annotations_document(run.activation_bytes, run.meta))
    return path


def render_run(
    root: str | os.PathLike[str],
    *,
    videos: bool = True,
    plots: bool = True,
    video_format: str = "auto",
    fps: int = 8,
) -> dict[str, Any]:
    """Rebuild everything from the saved files. Returns what was written."""
    t0 = time.monotonic()
    run = store.load_run(root)
    result: dict[str, Any] = {"dashboard": None, "plots": [], "videos": [], "annotations": None}
    result["annotations"] = write_annotations(run)
    result["dashboard"] = write_dashboard(run)
    if plots:
        result["plots"] = write_plots(run)
    if videos:
        for key in sorted(run.tensors):
            result["videos"].append(
                write_video(
                    run.tensors[key], run.path / "videos", video_format=video_format, fps=fps
                )
            )
    if plots or videos:  # again, now with links to the files just made
        result["dashboard"] = write_dashboard(run)
    result["seconds"] = time.monotonic() - t0
    return result

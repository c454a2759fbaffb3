"""`memlens tui SNAP [SNAP2]`: the terminal UI (Textual), for nodes reached over SSH."""

from __future__ import annotations

import os

import click

from memlens.cli.options import open_snapshots, opening_options, require_extra, snapshots_argument
from memlens.errors import MemlensError


@click.command("tui")
@snapshots_argument()
@opening_options()
@click.option(
    "--heat",
    type=click.Choice(["total", "parent"]),
    default="total",
    show_default=True,
    help="Colour and % of a tree row: its share of the whole tree, or of its parent "
    "(% inside the TUI switches).",
)
def command(
    paths: tuple[str, str | None],
    device: int | None,
    no_cache: bool,
    annotation_files: tuple[str, ...],
    heat: str,
) -> None:
    """Explore a snapshot in the terminal: timeline, live call-stack tree, allocations.

    With SNAPSHOT2, compare: both timelines share one cursor (Tab moves one pane alone) and
    Enter shows the diff tree of call sites (B - A). Press ? inside for every key.
    """
    require_extra("tui", "Textual", ("textual",), "tui")
    from memlens.views.tui.app import Session, TuiApp

    for path in paths:
        if path is not None and not os.path.isfile(path):
            raise MemlensError(f"no such snapshot file: {path}")
    sessions = []
    for path, snap in open_snapshots(paths, no_cache, annotation_files, device):
        dev = snap.device(device)
        if dev.n_events == 0:
            raise MemlensError(
                f"{path}: device {dev.device} has no trace events "
                "(record with torch.cuda.memory._record_memory_history())"
            )
        sessions.append(Session.of(os.path.basename(path), dev))
    TuiApp(sessions, freeze_gc=True, heat=heat).run()

"""The progress bar of a fleet run: files done, files/s and time left, on stderr, only
when stderr is a terminal (a log or a pipe gets nothing)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class FilesPerSecond(ProgressColumn):
    def render(self, task: Any) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.1f} files/s", style="progress.data.speed")


class _NoBar:
    def advance(self, n: int = 1) -> None:
        pass


class _Bar:
    def __init__(self, progress: Progress, task: Any) -> None:
        self.progress, self.task = progress, task

    def advance(self, n: int = 1) -> None:
        self.progress.advance(self.task, n)


@contextmanager
def progress_bar(
    total: int, label: str, enabled: bool | None = None, console: Console | None = None
) -> Iterator[Any]:
    """Yields an object with advance(); a bar only if `enabled` (default: stderr is a TTY),
    drawn on `console` (default: stderr)."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        yield _NoBar()
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        FilesPerSecond(),
        TimeRemainingColumn(),
    )
    console = console or Console(stderr=True)
    with Progress(*columns, console=console, transient=True) as progress:
        yield _Bar(progress, progress.add_task(label, total=total))

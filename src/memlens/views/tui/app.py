"""The Textual app: a timeline screen (one snapshot, or two sharing a cursor), tree screens
(live allocations, diff, allocation list), an allocation screen and help.

Screens only dispatch keys (tables in keys.py) to the pure models in chart.py and
outline.py and redraw; all numbers come from the snapshot engine.
"""

from __future__ import annotations

import gc

from textual.app import App

from memlens.views.tui.base import (
    CSS,
    AllocationScreen,
    HelpScreen,
    KeyScreen,
    Lines,
    Session,
    Settings,
    SummaryScreen,
    TextScreen,
)
from memlens.views.tui.timeline_screen import TimelineScreen
from memlens.views.tui.tree_screens import (
    AllocationListScreen,
    DiffScreen,
    LiveTreeScreen,
    TreeScreen,
)

__all__ = [
    "AllocationListScreen",
    "AllocationScreen",
    "DiffScreen",
    "HelpScreen",
    "KeyScreen",
    "Lines",
    "LiveTreeScreen",
    "Session",
    "Settings",
    "SummaryScreen",
    "TextScreen",
    "TimelineScreen",
    "TreeScreen",
    "TuiApp",
]


class TuiApp(App[None]):
    """memlens tui: one snapshot, or two to compare."""

    CSS = CSS
    ENABLE_COMMAND_PALETTE = False
    TITLE = "memlens"

    def __init__(
        self, sessions: list[Session], *, freeze_gc: bool = False, heat: str = "total"
    ) -> None:
        super().__init__()
        self.sessions = sessions
        self.freeze_gc = freeze_gc
        self.settings = Settings(heat=heat)

    def on_mount(self) -> None:
        self.push_screen(TimelineScreen(self.sessions))
        self.call_after_refresh(self._prepare)
        if self.freeze_gc:
            # Everything alive once the first frame is up lives as long as the app; moving
            # it out of the collector's reach keeps full collections (15-40 ms each on a
            # small machine, several a minute while keys are pressed) out of keypresses.
            self.call_after_refresh(gc.freeze)

    def _prepare(self) -> None:
        """Once the first frame is up: the summary figures, so `s` only draws them."""
        for s in self.sessions:
            s.summary()

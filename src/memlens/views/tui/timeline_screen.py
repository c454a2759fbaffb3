"""The timeline screen: one snapshot, or two sharing a cursor and a y scale."""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.widgets import Static

from memlens.views.escape import visible
from memlens.views.tui import keys
from memlens.views.tui.base import (
    AllocationScreen,
    KeyScreen,
    Lines,
    Session,
    SummaryScreen,
    one_line,
)
from memlens.views.tui.chart import AXIS_WIDTH, Viewport, column_at, render_chart
from memlens.views.tui.describe import cursor_line, summary_parts, view_line, wrap_parts
from memlens.views.tui.tree_screens import DiffScreen, LiveTreeScreen

DIM = Style(dim=True)


class TimelineScreen(KeyScreen):
    """In compare, each pane has its own viewport. Linked (the default), every move is made
    on the active pane's and copied to the other, so one cursor moves both; Tab, { or }
    unlinks them and switches the active pane, whose cursor then moves alone; l links them
    again."""

    TABLE = keys.TIMELINE

    def __init__(self, sessions: list[Session]) -> None:
        super().__init__()
        self.sessions = sessions
        self.compare = len(sessions) > 1
        # same number of events in both: a column is the same events in both panes
        n = max(s.dev.n_events for s in sessions)
        self.views = [Viewport(n) for _ in sessions]
        self.active = 0
        self.linked = True
        self.y_top = max(s.timeline.top for s in sessions)
        self._chart_width = 0

    @property
    def view(self) -> Viewport:
        """The viewport the keys move: the active pane's."""
        return self.views[self.active]

    @property
    def primary(self) -> Session:
        """The active pane's session (A unless the panes were switched)."""
        return self.sessions[self.active]

    def compose(self) -> ComposeResult:
        for k in range(len(self.sessions)):
            yield Static(one_line(self._summary_parts(k)[0]), classes="title", id=f"summary{k}")
            yield Lines(self._chart_provider(k), self._clicker(k), self._wheel, id=f"chart{k}")
            yield Static("", classes="line", id=f"status{k}")
        yield Static("", classes="line", id="view")
        hint = "←→ move  +/- zoom  ↑↓ floor  p peak  m stage  Enter "
        hint += "diff  Tab pane" if self.compare else "detail"
        yield Static(one_line(hint + "  s summary  ? help  q quit"), classes="hint")

    def run_key_action(self, action: str) -> None:
        super().run_key_action(action)
        self._sync()

    def _sync(self) -> None:
        """Linked panes: the other viewports take the active one's place."""
        if self.linked:
            for v in self.views:
                if v is not self.view:
                    v.copy_from(self.view)

    def on_mount(self) -> None:
        self.redraw()

    def _summary_parts(self, k: int) -> list[str]:
        s = self.sessions[k]
        parts = summary_parts(s.name, s.dev)
        if self.compare:
            # unlinked, the active pane (the one the keys move) is marked
            mark = "▶ " if not self.linked and k == self.active else ""
            parts[0] = f"{mark}{'AB'[k]}: {parts[0]}"
        return parts

    def _wrap_summaries(self) -> None:
        """Summaries take two lines when one would cut them and the screen has room; in
        compare, both charts share what is left equally."""
        width, height = self.size
        max_lines = 2 if height >= 24 else 1
        used = 2  # the view and hint lines
        for k in range(len(self.sessions)):
            lines = wrap_parts(self._summary_parts(k), width, max_lines)
            w = self.query_one(f"#summary{k}", Static)
            w.update(Text("\n", no_wrap=True).join(one_line(x) for x in lines))
            w.styles.height = len(lines)
            used += len(lines) + 1  # and the status line
        if self.compare:  # same height for both charts, so their y axes read alike
            chart_height = max((height - used) // len(self.sessions), 1)
            for k in range(len(self.sessions)):
                self.query_one(f"#chart{k}", Lines).styles.height = chart_height

    def _chart_provider(self, k: int) -> Callable[[int, int], list[Text]]:
        s = self.sessions[k]

        def provide(width: int, height: int) -> list[Text]:
            rows = render_chart(
                s.timeline, self.views[k], width, height, top=self.y_top, mono=self.app.no_color
            )
            if not self.linked and k != self.active:  # as in ptmem: the pane keys skip
                for row in rows:
                    row.stylize(DIM)
            return rows

        return provide

    def on_resize(self, event: events.Resize) -> None:
        self._wrap_summaries()
        self.call_after_refresh(self._fit_width)

    def _fit_width(self) -> None:
        width = self.query_one("#chart0", Lines).size.width - AXIS_WIDTH
        if width > 0 and width != self._chart_width:
            first = self._chart_width == 0
            self._chart_width = width
            for v in self.views:
                v.resize(width)
            if first:  # open on the peak: the moment people come to look at
                self.view.zoom_fit()
                self.do_peak()
                self._sync()
            self.redraw()

    def redraw(self) -> None:
        super().redraw()
        for k, s in enumerate(self.sessions):
            self.query_one(f"#status{k}", Static).update(
                one_line(cursor_line(s.dev, s.timeline, self.views[k]))
            )
        line = view_line(self.view)
        if self.compare and not self.linked:
            line = f"{'AB'[self.active]} moves alone (Tab: switch, l: link) · {line}"
        self.query_one("#view", Static).update(one_line(line))

    def _clicker(self, k: int) -> Callable[[int, int], None]:
        def click(x: int, y: int) -> None:
            """A click on a pane's chart; unlinked, that pane becomes the active one."""
            if not self.linked and k != self.active:
                self.active = k
                self._retitle()
            col = column_at(x, self.view)
            if col is not None:
                self.view.goto_column(col, self.primary.timeline)
                self._sync()
                self.redraw()

        return click

    def _retitle(self) -> None:
        """The active pane changed: its title mark, and which chart is dimmed."""
        self._wrap_summaries()
        self.redraw()

    def _wheel(self, steps: int) -> None:
        self.do_step(steps)
        self._sync()
        self.redraw()

    # ---- actions ---------------------------------------------------------------------
    def do_step(self, n: int) -> None:
        self.view.step(n, self.primary.timeline)

    def do_quarter(self, n: int) -> None:
        """ptmem's [ and ]: a quarter of the chart's width."""
        self.view.step(n * max(self.view.width // 4, 1), self.primary.timeline)

    def do_switch_pane(self) -> None:
        if not self.compare:
            self.notify("Tab switches panes when comparing: memlens tui A B", markup=False)
            return
        self.linked = False
        self.active = 1 - self.active
        self._retitle()

    def do_link(self) -> None:
        if not self.compare:
            return
        self.linked = True
        self._retitle()

    def do_pan(self, n: int) -> None:
        self.view.pan(n * self.view.width, self.primary.timeline)

    def do_first(self) -> None:
        self.view.goto_event(0)

    def do_last(self) -> None:
        self.view.goto_event(self.view.n_events - 1)

    def do_zoom_in(self) -> None:
        self.view.zoom(0.5)

    def do_zoom_out(self) -> None:
        self.view.zoom(2)

    def do_zoom_fit(self) -> None:
        self.view.zoom_fit()

    def do_floor(self, n: int) -> None:
        self.view.raise_floor(self.y_top, n)

    def do_floor_reset(self) -> None:
        self.view.floor = 0

    def _goto_peak(self, peaks: list[int]) -> None:
        """To A's peak; in compare, when already there, to B's. Unlinked, the active pane
        goes to its own snapshot's peak."""
        peaks = [max(p, 0) for p in peaks]
        if self.compare and not self.linked:
            self.view.goto_event(peaks[self.active])
        elif self.compare and self.view.cursor == peaks[0]:
            self.view.goto_event(peaks[1])
        else:
            self.view.goto_event(peaks[0])

    def do_peak(self) -> None:
        self._goto_peak([s.dev.peak_event_index for s in self.sessions])

    def do_reserved_peak(self) -> None:
        self._goto_peak([s.dev.peak_reserved_event_index for s in self.sessions])

    def do_summary(self) -> None:
        self.app.push_screen(SummaryScreen(self.sessions))

    def do_oom(self) -> None:
        """To the next OOM entry of the first snapshot that has one, after the last back to
        the first."""
        ooms = next((s.timeline.ooms for s in self.sessions if len(s.timeline.ooms)), None)
        if ooms is None:
            self.notify("no out-of-memory entry in this trace", markup=False)
            return
        after = ooms[ooms > self.view.cursor]
        self.view.goto_event(int(after[0] if len(after) else ooms[0]))

    def do_marker(self, direction: int) -> None:
        events_ = sorted({m.event for s in self.sessions for m in s.timeline.markers if m.start})
        here = self.view.cursor
        cands = (
            [e for e in events_ if e > here] if direction > 0 else [e for e in events_ if e < here]
        )
        if not cands:
            self.notify(
                "no more stage markers" if events_ else "no stage markers in this trace",
                markup=False,
            )
            return
        self.view.goto_event(cands[0] if direction > 0 else cands[-1])

    def _event_of(self, k: int) -> int:
        """The event at pane k's cursor (a shorter trace: its last event)."""
        return min(self.views[k].cursor, self.sessions[k].dev.n_events - 1)

    def do_detail(self) -> None:
        if self.compare:
            a, b = self.sessions
            self.app.push_screen(DiffScreen(a, self._event_of(0), b, self._event_of(1)))
        else:
            self.app.push_screen(LiveTreeScreen(self.primary.dev, self._event_of(0)))

    def do_diff_peaks(self) -> None:
        if not self.compare:
            self.notify("d compares two snapshots: memlens tui A B", markup=False)
            return
        a, b = self.sessions
        pa, pb = a.dev.peak_event_index, b.dev.peak_event_index
        self.app.push_screen(DiffScreen(a, pa, b, pb, what="peaks"))

    def do_event_allocation(self) -> None:
        s = self.primary
        e = self._event_of(self.active)
        if e < 0:
            return
        row = int(s.dev.alloc_row[e])
        if row < 0:
            # the action name is the snapshot's: literal text, never markup
            self.notify(
                f"event {e:,} ({visible(s.dev.action_name(e))}) belongs to no allocation",
                markup=False,
            )
            return
        self.app.push_screen(AllocationScreen(s.dev, row))

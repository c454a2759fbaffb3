"""The timeline chart: memory over events as columns of bars, without Textual.

Each column is a bucket of `bucket` consecutive events and shows the *maximum* active and
reserved bytes inside it, so a one-event peak is never averaged away. The maxima come from
the level-of-detail index the browser viewer uses (views.layout.index.RangeArgmax, built
once per curve): a redraw asks only for the visible columns, O(log n) each, so a keypress
never rescans all events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from rich.style import Style
from rich.text import Text

from memlens.analysis.stages import annotation_rows_for
from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace
from memlens.units import format_bytes
from memlens.views.layout.index import RangeArgmax

EIGHTHS = " ▁▂▃▄▅▆▇█"
RESERVED_GLYPH = "░"  # reserved-but-not-active memory, stacked above the active bar
CURSOR_GLYPH = "▲"
MARKER_GLYPH = "◆"
OOM_GLYPH = "✕"  # an out-of-memory entry: where the allocator gave up
AXIS_WIDTH = 11  # y-axis labels ("1023.99 MiB") plus a separator
CURSOR_LINE_GLYPH = "┊"  # without colour, the cursor's column above its bar
MIN_WIDTH, MIN_HEIGHT = 30, 2  # below this the chart says so instead of drawing
# From this height on, a line of event numbers goes under the axis row (below it, the rows
# are worth more as bars).
LABELS_MIN_HEIGHT = 8
_TICKS = (5, 10, 20, 50, 100, 200, 500)  # columns between two event labels

# Colours are given as RGB, not ANSI names: Textual maps the 16 ANSI colours through its
# theme, where yellow and dark orange came out the same.
ACTIVE = Style(color="#00afff")
ACTIVE_CURSOR = Style(color="#000000", bgcolor="#ffd700")
RESERVED = Style(color="#af87d7")
RESERVED_CURSOR = Style(color="#875faf", bgcolor="#ffd700")
EMPTY_CURSOR = Style(bgcolor="#4e4e4e")
AXIS = Style(dim=True)
MARKER = Style(color="#5fd75f", bold=True)
CURSOR_MARK = Style(color="#ffd700", bold=True)
OOM_MARK = Style(color="#ff3030", bold=True)
_GLYPHS = np.array(list(EIGHTHS + RESERVED_GLYPH + CURSOR_LINE_GLYPH))
_CURSOR_LINE = len(EIGHTHS) + 1  # index of CURSOR_LINE_GLYPH in _GLYPHS
# by cell kind: empty, active, reserved; then the same three on the cursor's column
_STYLES = (Style.null(), ACTIVE, RESERVED, EMPTY_CURSOR, ACTIVE_CURSOR, RESERVED_CURSOR)
# NO_COLOR: the glyphs tell active from reserved; the cursor's column is a dotted line
_MONO_STYLES = (Style.null(),) * 3 + (Style(bold=True),) + (Style.null(),) * 2
_MONO_MARKS = (Style(bold=True), Style(bold=True))


@dataclass(frozen=True)
class Marker:
    """A stage annotation (record_function START/END) placed on the event axis."""

    event: int
    name: str
    start: bool


@dataclass
class Timeline:
    """One device's curves, with their range-maximum indexes."""

    active: np.ndarray  # int64 bytes after each event
    reserved: np.ndarray
    markers: list[Marker] = field(default_factory=list)
    start_top: int = 0  # the higher of active and reserved bytes before the first event
    ooms: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # OOM events

    @classmethod
    def of_device(cls, dev: DeviceTrace) -> Timeline:
        return cls(
            np.asarray(dev.active_after, dtype=np.int64),
            np.asarray(dev.reserved_after, dtype=np.int64),
            stage_markers(dev),
            max(dev.baseline_bytes, dev.reserved_start_bytes),
            np.flatnonzero(dev.action == Action.OOM).astype(np.int64),
        )

    @property
    def n_events(self) -> int:
        return len(self.active)

    @cached_property
    def top(self) -> int:
        """Highest value either curve reaches, before the first event included (the default
        top of the y axis, so it agrees with the peaks of the summary)."""
        if self.n_events == 0:
            return self.start_top
        return int(max(self.active.max(), self.reserved.max(), self.start_top))

    @cached_property
    def start_marker_events(self) -> np.ndarray:
        """Sorted events of the START markers (drawn on the axis row)."""
        return np.array([m.event for m in self.markers if m.start], dtype=np.int64)

    @cached_property
    def _stages(self) -> tuple[np.ndarray, list[str]]:
        """Per marker: the innermost stage open right after it (replayed once)."""
        open_: list[str] = []
        after: list[str] = []
        for m in self.markers:
            if m.start:
                open_.append(m.name)
            elif m.name in open_:  # close the innermost stage of that name
                del open_[len(open_) - 1 - open_[::-1].index(m.name)]
            after.append(open_[-1] if open_ else "")
        return np.array([m.event for m in self.markers], dtype=np.int64), after

    def stage_at(self, event: int) -> str:
        """Name of the innermost stage open at `event` ('' when none)."""
        events, after = self._stages
        k = int(np.searchsorted(events, event, side="right")) - 1
        return after[k] if k >= 0 else ""

    @cached_property
    def _active_max(self) -> RangeArgmax:
        return RangeArgmax(self.active)

    @cached_property
    def _reserved_max(self) -> RangeArgmax:
        return RangeArgmax(self.reserved)

    def columns(
        self, bucket: int, start: int = 0, count: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(max active, max reserved) per column of `bucket` events, `count` columns from
        column `start` (default: to the end of the trace)."""
        n_columns = -(-self.n_events // bucket)
        count = n_columns - start if count is None else min(count, n_columns - start)
        lo = (start + np.arange(max(count, 0), dtype=np.int64)) * bucket
        hi = np.minimum(lo + bucket, self.n_events)
        return (
            self.active[self._active_max.query(lo, hi)],
            self.reserved[self._reserved_max.query(lo, hi)],
        )

    def peak_in(self, first: int, last: int) -> int:
        """Event of the highest active value in [first, last] (first one on ties)."""
        last = min(last, self.n_events - 1)
        if first > last:
            return last
        return int(self._active_max.query(np.array([first]), np.array([last + 1]))[0])


def stage_markers(dev: DeviceTrace) -> list[Marker]:
    """Annotations of this device, each placed at the first event after its time, so a
    stage is open from its first event to its last, as `memlens stages` counts them
    (analysis.stages.stage_intervals: an event stamped at a START's microsecond is before
    the stage, one at an END's is inside)."""
    snap = dev.snapshot
    ann = snap.annotations
    if len(ann) == 0 or dev.n_events == 0 or dev.time_us[0] < 0:
        return []
    mine = annotation_rows_for(dev)  # the annotations `memlens stages` pairs
    events = np.searchsorted(dev.monotonic_time_us, ann.time_us[mine], side="right")
    out = [
        Marker(int(e), snap.string(int(ann.name[k])), int(ann.stage[k]) != 1)
        for k, e in zip(mine.tolist(), events.tolist())
    ]
    return sorted(out, key=lambda m: m.event)


@dataclass
class Viewport:
    """Where the user looks: zoom (events per column), first column, cursor event, y floor.

    Shared by both timelines in compare mode, so one cursor moves both.
    """

    n_events: int
    width: int = 80  # chart columns available
    bucket: int = 1
    start: int = 0  # first visible column (in columns of `bucket` events)
    cursor: int = 0  # the event the detail view opens at
    floor: int = 0  # bytes at the bottom of the y axis

    def __post_init__(self) -> None:
        self.bucket = self.fit_bucket
        self._clamp()

    def copy_from(self, other: Viewport) -> None:
        """Take another viewport's place (linked panes in compare)."""
        self.width, self.bucket, self.start = other.width, other.bucket, other.start
        self.cursor, self.floor = other.cursor, other.floor
        self._clamp()

    # ---- geometry --------------------------------------------------------------------
    @property
    def fit_bucket(self) -> int:
        """Smallest bucket that shows the whole trace in the available width."""
        return max(1, math.ceil(self.n_events / max(self.width, 1)))

    @property
    def n_columns(self) -> int:
        return max(1, math.ceil(self.n_events / self.bucket))

    @property
    def cursor_column(self) -> int:
        return self.cursor // self.bucket

    def column_events(self, column: int) -> tuple[int, int]:
        """First and last event of a column."""
        first = column * self.bucket
        return first, min(first + self.bucket, self.n_events) - 1

    def resize(self, width: int) -> None:
        self.width = max(width, 1)
        self.bucket = min(self.bucket, self.fit_bucket)
        self._clamp()

    def _clamp(self) -> None:
        self.cursor = min(max(self.cursor, 0), max(self.n_events - 1, 0))
        col = self.cursor_column
        self.start = min(self.start, col)
        self.start = max(self.start, col - self.width + 1)
        self.start = min(self.start, max(self.n_columns - self.width, 0))
        self.start = max(self.start, 0)

    # ---- moves -----------------------------------------------------------------------
    def goto_event(self, event: int) -> None:
        """Put the cursor on an event, centring it if it is off screen."""
        self.cursor = event
        col = self.cursor_column
        if not self.start <= col < self.start + self.width:
            self.start = col - self.width // 2
        self._clamp()

    def goto_column(self, column: int, timeline: Timeline | None = None) -> None:
        """Cursor to a column, on its highest event (what the bar shows)."""
        column = min(max(column, 0), self.n_columns - 1)
        first, last = self.column_events(column)
        self.cursor = timeline.peak_in(first, last) if timeline is not None else first
        if column < self.start:
            self.start = column
        elif column >= self.start + self.width:
            self.start = column - self.width + 1
        self._clamp()

    def step(self, columns: int, timeline: Timeline | None = None) -> None:
        self.goto_column(self.cursor_column + columns, timeline)

    def pan(self, columns: int, timeline: Timeline | None = None) -> None:
        """Scroll the view; the cursor keeps its place on screen."""
        offset = self.cursor_column - self.start
        self.start = min(max(self.start + columns, 0), max(self.n_columns - self.width, 0))
        self.goto_column(self.start + offset, timeline)

    def zoom(self, factor: float) -> None:
        """factor < 1 zooms in (fewer events per column); the cursor stays where it is on screen."""
        offset = self.cursor_column - self.start
        new = int(self.bucket * factor) if factor > 1 else self.bucket // round(1 / factor)
        self.bucket = min(max(new, 1), self.fit_bucket)
        self.start = self.cursor_column - offset
        self._clamp()

    def zoom_fit(self) -> None:
        self.bucket = self.fit_bucket
        self.start = 0
        self._clamp()

    def raise_floor(self, top: int, steps: int) -> None:
        """Move the y floor by steps * 5% of the top (never to or above the top)."""
        step = max(top // 20, 1)
        self.floor = min(max(self.floor + steps * step, 0), max(top - step, 0))


def render_chart(
    timeline: Timeline,
    view: Viewport,
    width: int,
    height: int,
    *,
    top: int | None = None,
    mono: bool = False,
) -> list[Text]:
    """Rows of the chart (bars, an axis row with the cursor and stage markers, then from
    LABELS_MIN_HEIGHT lines on the event numbers of the x axis).

    `width` and `height` are the whole area; the y-axis labels take AXIS_WIDTH columns and
    the axis row one line. Too small an area gives a one-line notice instead. `mono`
    draws without colour (NO_COLOR).
    """
    if width < MIN_WIDTH or height < MIN_HEIGHT:
        return [Text(f"(too small: {width}x{height})", style=AXIS)]
    cols = width - AXIS_WIDTH
    labels = height >= LABELS_MIN_HEIGHT
    rows = height - 1 - labels
    top = timeline.top if top is None else top
    floor = min(view.floor, max(top - 1, 0))
    span = max(top - floor, 1)
    start = view.start
    if timeline.n_events:
        amax, rmax = timeline.columns(view.bucket, start, cols)
    else:
        amax = rmax = np.zeros(0, dtype=np.int64)
    # heights in eighths of a row; anything above the floor gets at least one eighth
    scale = rows * 8 / span
    ha = np.ceil(np.clip(amax - floor, 0, span) * scale).astype(np.int64)
    hr = np.ceil(np.clip(rmax - floor, 0, span) * scale).astype(np.int64)
    # one glyph and one style code per cell, for the whole grid at once
    below = ((rows - 1 - np.arange(rows)) * 8)[:, None]  # eighths under each row
    ea = np.clip(ha[None, :] - below, 0, 8)
    er = np.clip(hr[None, :] - below, 0, 8)
    glyph = np.where(ea > 0, ea, np.where(er > 0, 9, 0))  # index into _GLYPHS
    kind = np.where(ea > 0, 1, np.where(er > 0, 2, 0))  # index into _STYLES
    cursor_x = view.cursor_column - start
    if 0 <= cursor_x < kind.shape[1]:
        kind[:, cursor_x] += 3
        if mono:
            empty = glyph[:, cursor_x] == 0
            glyph[empty, cursor_x] = _CURSOR_LINE
    chars = _GLYPHS[glyph]
    styles = _MONO_STYLES if mono else _STYLES
    out: list[Text] = []
    for r in range(rows):
        if r == 0:
            label = format_bytes(top)
        elif r == rows - 1:
            label = format_bytes(floor)
        elif r == rows // 2 and rows >= 5:
            label = format_bytes(floor + span * (rows - r - 0.5) / rows)
        else:
            label = ""
        # the axis style on its own span: as the Text's style it would dim the bars too
        line = Text(no_wrap=True, overflow="crop")
        line.append(f"{label:>{AXIS_WIDTH - 1}}│", AXIS)
        row_chars, row_kind = chars[r], kind[r]
        cuts = [0, *(np.flatnonzero(np.diff(row_kind)) + 1).tolist(), len(row_kind)]
        for a, b in zip(cuts, cuts[1:]):
            if b > a:
                line.append("".join(row_chars[a:b]), styles[int(row_kind[a])])
        out.append(line)
    out.append(_axis_row(timeline, view, cols, mono))
    if labels:
        out.append(event_labels(view, cols))
    return out


def event_labels(view: Viewport, cols: int) -> Text:
    """The x axis's numbers: the first event of every few columns, written from that
    column on. Labelled columns are multiples of one tick, so a label stays on its column
    while the view pans; the tick is the smallest that keeps labels apart."""
    last = min((view.start + cols) * view.bucket, max(view.n_events - 1, 0))
    need = len(f"{last:,}") + 4  # at least 4 spaces between two labels
    tick = next((t for t in _TICKS if t >= need), _TICKS[-1])
    cells = [" "] * cols
    col = -(-view.start // tick) * tick  # the first multiple of tick on screen
    while col < view.start + cols and col * view.bucket < view.n_events:
        text = f"{col * view.bucket:,}"
        x = col - view.start
        if x + len(text) > cols:
            break
        cells[x : x + len(text)] = text
        col += tick
    return Text(f"{'event':>{AXIS_WIDTH - 1}} " + "".join(cells), style=AXIS, no_wrap=True)


def _axis_row(timeline: Timeline, view: Viewport, cols: int, mono: bool) -> Text:
    cells = [" "] * cols
    styles: list[Style | None] = [None] * cols
    marker, cursor = _MONO_MARKS if mono else (MARKER, CURSOR_MARK)
    xs = timeline.start_marker_events // view.bucket - view.start
    for x in np.unique(xs[(xs >= 0) & (xs < cols)]).tolist():
        cells[x], styles[x] = MARKER_GLYPH, marker
    xs = timeline.ooms // view.bucket - view.start
    for x in np.unique(xs[(xs >= 0) & (xs < cols)]).tolist():
        cells[x], styles[x] = OOM_GLYPH, (marker if mono else OOM_MARK)
    x = view.cursor_column - view.start
    if 0 <= x < cols:
        cells[x], styles[x] = CURSOR_GLYPH, cursor
    line = Text(no_wrap=True, overflow="crop")
    line.append(" " * (AXIS_WIDTH - 1) + "└", AXIS)
    for ch, st in zip(cells, styles):
        line.append(ch, st)
    return line


def column_at(x: int, view: Viewport) -> int | None:
    """Column under screen offset x of the chart area (None on the y axis)."""
    if x < AXIS_WIDTH:
        return None
    return view.start + x - AXIS_WIDTH

"""Building blocks shared by the screens: the session, the line-drawing widget, the
key-table screen and the plain text screens (allocation, help)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich.segment import Segment
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.geometry import Region
from textual.screen import Screen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from memlens.snapshot.model import DeviceTrace
from memlens.views.escape import visible
from memlens.views.tui import keys
from memlens.views.tui.chart import Timeline
from memlens.views.tui.describe import describe_allocation, summary_figures

CSS = """
Lines { height: 1fr; text-wrap: nowrap; text-overflow: ellipsis; }
.line, .title, .hint { height: 1; text-wrap: nowrap; text-overflow: ellipsis; }
.title { text-style: bold; }
.hint { color: $text-muted; }
"""

if TYPE_CHECKING:  # typing.Self is Python 3.11+, and memlens supports 3.10
    from typing_extensions import Self


HEAT_MODES = ("total", "parent")  # what a tree row's colour and % are a share of


@dataclass
class Settings:
    """Choices that hold across screens (the app's)."""

    heat: str = "total"  # one of HEAT_MODES


@dataclass
class Session:
    """One opened snapshot device: its name on screen, its trace and its timeline."""

    name: str
    dev: DeviceTrace
    timeline: Timeline
    _summary: list[str] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, name: str, dev: DeviceTrace) -> Session:
        return cls(name, dev, Timeline.of_device(dev))

    def summary(self) -> list[str]:
        """The summary screen's figures, made once (tens of ms on 1M events)."""
        if self._summary is None:
            self._summary = summary_figures(self.dev)
        return self._summary


def one_line(text: str) -> Text:
    """A status/title line: cut with an ellipsis rather than wrapped onto a hidden line.
    Rich Text is never parsed as markup; control characters are shown as escapes."""
    return Text(visible(text), no_wrap=True, overflow="ellipsis")


def wrap_lines(lines: list[str], width: int, indent: int = 4) -> list[str]:
    """Lines longer than `width` go on over indented continuation lines (broken between
    words where one fits, else anywhere), so a long frame is read whole rather than cut."""
    if width <= indent + 1:
        return lines
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        out.extend(
            textwrap.wrap(
                line,
                width,
                subsequent_indent=" " * indent,
                replace_whitespace=False,
                drop_whitespace=True,
                break_on_hyphens=False,
            )
        )
    return out


class Lines(Widget):
    """Draws the rows its provider returns for the widget's current size.

    Rows go straight to strips (the Line API) instead of through Textual's content
    pipeline, which re-wraps rich text and cost tens of milliseconds a frame for a chart.
    """

    _strips: list[Strip] | None = None

    def __init__(
        self,
        provider: Callable[[int, int], list[Text]],
        click: Callable[[int, int], None] | None = None,
        wheel: Callable[[int], None] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.provider = provider
        self.click = click
        self.wheel = wheel

    def render(self) -> Text:
        """All rows as one Text (what tests read; drawing goes through render_line)."""
        return Text("\n", no_wrap=True).join(self.provider(self.size.width, self.size.height))

    def refresh(self, *regions: Region, **kw: Any) -> Self:
        self._strips = None
        return super().refresh(*regions, **kw)

    def render_line(self, y: int) -> Strip:
        width, height = self.size
        base = self.visual_style.rich_style
        if self._strips is None or len(self._strips) != height:
            console = self.app.console
            self._strips = []
            for text in self.provider(width, height)[:height]:
                segments = Segment.apply_style(text.render(console, end=""), base)
                self._strips.append(Strip(list(segments)).crop_extend(0, width, base))
            while len(self._strips) < height:
                self._strips.append(Strip.blank(width, base))
        return self._strips[y] if 0 <= y < len(self._strips) else Strip.blank(width, base)

    def on_resize(self, event: events.Resize) -> None:
        self._strips = None

    def on_click(self, event: events.Click) -> None:
        if self.click is not None:
            self.click(event.x, event.y)

    def _wheel(self, event: events.MouseEvent, steps: int) -> None:
        if self.wheel is not None:
            event.stop()  # or the screen would scroll too
            self.wheel(steps)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._wheel(event, 1)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._wheel(event, -1)


class KeyScreen(Screen[None], inherit_bindings=False):
    """A screen whose keys come from one table of keys.py; each action is a do_* method."""

    TABLE: tuple[keys.Key, ...] = ()

    def on_key(self, event: events.Key) -> None:
        if self.intercept(event):
            event.stop()
            return
        action = keys.lookup(self.TABLE, event.key, event.character)
        if action is None:
            return
        event.stop()
        self.run_key_action(action)
        if self.is_current:  # not after the action pushed or popped a screen
            self.redraw()

    def run_key_action(self, action: str) -> None:
        """Call do_<name>(arg) for an action of a key table ("step(-1)", "peak"). (Not
        named run_action: that is textual's async Widget.run_action(action, namespaces).)"""
        name, _, arg = action.partition("(")
        self.do(name, [int(arg.rstrip(")"))] if arg else [])

    def do(self, name: str, args: list[int]) -> None:
        getattr(self, f"do_{name}")(*args)

    def intercept(self, event: events.Key) -> bool:
        """Give a screen the key first (search typing); True when it used it."""
        return False

    def redraw(self) -> None:
        for w in self.query(Lines):
            w.refresh()

    @property
    def settings(self) -> Settings:
        """The app's settings (defaults when the screen runs in another app, as in tests)."""
        found = getattr(self.app, "settings", None)
        return found if isinstance(found, Settings) else _DEFAULT_SETTINGS

    def do_help(self) -> None:
        self.app.push_screen(HelpScreen())

    def do_close(self) -> None:
        self.app.pop_screen()

    def do_quit(self) -> None:
        self.app.exit()


_DEFAULT_SETTINGS = Settings()


class TextScreen(KeyScreen):
    """Scrollable lines of text."""

    TABLE = keys.TEXT

    HINT = "↑↓ PgUp PgDn scroll  ? help  q back"

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.text_lines = lines
        self.offset_ = 0
        self._page = 20

    def compose(self) -> ComposeResult:
        yield Lines(self._provide, wheel=self._wheel, id="text")
        yield Static(one_line(self.HINT), classes="hint")

    def _provide(self, width: int, height: int) -> list[Text]:
        self._page = max(height - 1, 1)
        lines = wrap_lines(self.text_lines, width)
        self.offset_ = max(0, min(self.offset_, len(lines) - height))
        shown = lines[self.offset_ : self.offset_ + height]
        return [Text(visible(s), no_wrap=True, overflow="ellipsis") for s in shown]

    def _wheel(self, steps: int) -> None:
        self.do_scroll(3 * steps)
        self.redraw()

    def do_scroll(self, n: int) -> None:
        self.offset_ = max(0, self.offset_ + n)

    def do_page(self, n: int) -> None:
        self.do_scroll(n * self._page)


class AllocationScreen(TextScreen):
    def __init__(self, dev: DeviceTrace, row: int) -> None:
        super().__init__(describe_allocation(dev, row))


class SummaryScreen(TextScreen):
    """ptmem's -s figures for each snapshot open (one after the other in compare)."""

    def __init__(self, sessions: list[Session]) -> None:
        lines: list[str] = []
        for k, s in enumerate(sessions):
            tag = f"{'AB'[k]}: " if len(sessions) > 1 else ""
            lines += [*([""] if lines else []), f"summary of {tag}{s.name}", ""]
            lines += s.summary()
        super().__init__(lines)


class HelpScreen(TextScreen):
    """Every key; the scrolling keys scroll, any other key closes."""

    HINT = "↑↓ PgUp PgDn scroll  any other key closes"

    def __init__(self) -> None:
        super().__init__(keys.help_lines())

    def intercept(self, event: events.Key) -> bool:
        """Every key is the help's: scrolling keys scroll, any other closes this screen
        only. (Not an on_key of its own: Textual also runs the base class's on_key, whose
        table would have closed the screen below too.)"""
        action = keys.lookup(keys.TEXT, event.key, event.character)
        if action is None or not action.startswith(("scroll", "page")):
            self.app.pop_screen()
            return True
        self.run_key_action(action)
        self.redraw()
        return True

"""Every key of every view, in one place: the screens dispatch from these tables and the help
screen (and docs/tui.md, checked by a test) list them, so the three can never disagree."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Key:
    keys: tuple[str, ...]  # Textual key names ("left", "enter") or single characters ("+")
    action: str
    help: str

    @property
    def shown(self) -> str:
        return " ".join(_SHOWN.get(k, k) for k in self.keys)


_SHOWN = {
    "left": "←", "right": "→", "up": "↑", "down": "↓",
    "shift+left": "Shift+←", "shift+right": "Shift+→",
    "pageup": "PgUp", "pagedown": "PgDn", "home": "Home", "end": "End",
    "enter": "Enter", "escape": "Esc", "space": "Space", "backspace": "Backspace",
    "tab": "Tab",
}  # fmt: skip

TIMELINE = (
    Key(("left",), "step(-1)", "cursor one column left"),
    Key(("right",), "step(1)", "cursor one column right"),
    Key(("shift+left", ","), "step(-10)", "jump 10 columns left"),
    Key(("shift+right", "."), "step(10)", "jump 10 columns right"),
    Key(("b",), "step(-15)", "jump 15 columns left (ptmem's b)"),
    Key(("f",), "step(15)", "jump 15 columns right (ptmem's f)"),
    Key(("[",), "quarter(-1)", "jump a quarter of the screen left"),
    Key(("]",), "quarter(1)", "jump a quarter of the screen right"),
    Key(("pageup",), "pan(-1)", "pan one screen left"),
    Key(("pagedown",), "pan(1)", "pan one screen right"),
    Key(("home",), "first", "first event"),
    Key(("end",), "last", "last event"),
    Key(("+", "="), "zoom_in", "zoom in around the cursor (half the events per column)"),
    Key(("-", "_"), "zoom_out", "zoom out around the cursor (twice the events per column)"),
    Key(("0",), "zoom_fit", "zoom to fit the whole trace"),
    Key(("up",), "floor(1)", "raise the y-axis floor (5% of the top)"),
    Key(("down",), "floor(-1)", "lower the y-axis floor"),
    Key(("r",), "floor_reset", "reset the y-axis floor to 0"),
    Key(("p",), "peak", "jump to the peak of active memory (compare: A's, again: B's)"),
    Key(("R",), "reserved_peak", "jump to the peak of reserved memory (compare: A's, again: B's)"),
    Key(("m",), "marker(1)", "jump to the next stage marker"),
    Key(("M",), "marker(-1)", "jump to the previous stage marker"),
    Key(("o",), "oom", "jump to the next out-of-memory entry (✕ on the axis)"),
    Key(("enter",), "detail", "live allocations at the cursor (compare: diff tree at the cursor)"),
    Key(("d",), "diff_peaks", "compare: diff tree of the two peaks"),
    Key(("a",), "event_allocation", "the allocation of the event at the cursor"),
    Key(("s",), "summary", "summary: memory, allocation and file figures"),
    Key(
        ("tab", "{", "}"),
        "switch_pane",
        "compare: switch the active pane; the keys then move its cursor alone",
    ),
    Key(("l",), "link", "compare: link the panes again (both follow the active one)"),
    Key(("?",), "help", "this help"),
    Key(("q", "Q"), "quit", "quit"),
)

TREE = (
    Key(("up", "k"), "move(-1)", "previous row"),
    Key(("down", "j"), "move(1)", "next row"),
    Key(("pageup",), "page(-1)", "one screen up"),
    Key(("pagedown",), "page(1)", "one screen down"),
    Key(("home",), "home", "first row"),
    Key(("end",), "end", "last row"),
    Key(("right",), "expand", "expand; if expanded, go to the first child"),
    Key(("left",), "collapse", "collapse; if collapsed, go to the parent"),
    Key(("space",), "toggle", "expand or collapse"),
    Key(("e",), "expand_all", "expand everything below the cursor"),
    Key(("c",), "collapse_all", "collapse everything below the cursor"),
    Key(("p",), "parent", "go to the parent"),
    Key(("o",), "first_child", "go to the first child"),
    Key(("[",), "sibling(-1)", "previous sibling"),
    Key(("]",), "sibling(1)", "next sibling"),
    Key(("enter",), "open", "expand or collapse (in an allocation list: that allocation)"),
    Key(("f",), "focus", "focus: show only the subtree at the cursor"),
    Key(("b",), "back", "back out of the last focus"),
    Key(("r",), "unfocus", "back to the whole tree"),
    Key(("h",), "hide", "hide/show torch, stdlib and C++ frames"),
    Key(("%",), "heat", "heat colour and %: share of the total / of the parent"),
    Key(("/",), "search", "incremental search (Enter keeps it, Esc drops it)"),
    Key(("n",), "match(1)", "next match"),
    Key(("N",), "match(-1)", "previous match"),
    Key(("a",), "allocations", "allocations under the cursor (diff: of both; list: that one)"),
    Key(("?",), "help", "this help"),
    Key(("q",), "close_or_back", "back out of the last focus, else back (ptmem's q)"),
    Key(("escape",), "close", "back (first clears a search)"),
    Key(("Q",), "quit", "quit memlens"),
)

TEXT = (
    Key(("up", "k"), "scroll(-1)", "scroll up"),
    Key(("down", "j"), "scroll(1)", "scroll down"),
    Key(("pageup",), "page(-1)", "one screen up"),
    Key(("pagedown",), "page(1)", "one screen down"),
    Key(("home",), "scroll(-1000000000)", "top"),
    Key(("end",), "scroll(1000000000)", "bottom"),
    Key(("?",), "help", "this help"),
    Key(("q", "escape"), "close", "back"),
    Key(("Q",), "quit", "quit memlens"),
)

SECTIONS = (
    ("Timeline", TIMELINE),
    ("Tree (detail, diff, allocation list)", TREE),
    ("Allocation, summary, help", TEXT),
)


MOUSE_HELP = (
    "Mouse: click a column of the timeline to put the cursor there; the wheel over",
    "the chart moves it. Click a row of a tree to select it, click it again to open",
    "or close it. The wheel scrolls trees and text.",
)


def lookup(table: tuple[Key, ...], key: str, character: str | None) -> str | None:
    """The action bound to a key event (by name first, then by the character it types)."""
    for k in table:
        if key in k.keys or (character is not None and character in k.keys):
            return k.action
    return None


def help_lines() -> list[str]:
    lines = ["memlens tui: keys (arrows, PgUp/PgDn scroll; any other key closes this help)", ""]
    for title, table in SECTIONS:
        lines.append(title)
        for k in table:
            lines.append(f"  {k.shown:<18} {k.help}")
        lines.append("")
    lines.extend(MOUSE_HELP)
    return lines

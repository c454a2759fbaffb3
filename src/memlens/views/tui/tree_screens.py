"""Tree screens: live allocations by call stack, the diff of two snapshots, and the list of
allocations under a row. They share one outline (outline.py) and one key table."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.widgets import Static

from memlens.snapshot.model import DeviceTrace
from memlens.units import format_bytes
from memlens.views.tui import keys
from memlens.views.tui.base import HEAT_MODES, AllocationScreen, KeyScreen, Lines, Session, one_line
from memlens.views.tui.describe import event_time
from memlens.views.tui.outline import Outline, breadcrumb, signed_bytes
from memlens.views.tui.trees import (
    Node,
    allocation_list,
    allocation_lists,
    diff_tree,
    live_stack_tree,
    matching_nodes,
    rows_under,
)

# actions of the tree table that are the outline's own moves
OUTLINE_ACTIONS: dict[str, Callable[..., None]] = {
    "move": Outline.move,
    "home": Outline.home,
    "end": Outline.end,
    "expand": Outline.expand,
    "collapse": Outline.collapse,
    "toggle": Outline.toggle,
    "open": Outline.toggle,  # Enter, as in ptmem: expand or collapse the row
    "expand_all": Outline.expand_all,
    "collapse_all": Outline.collapse_all,
    "parent": Outline.parent,
    "first_child": Outline.first_child,
    "sibling": Outline.sibling,
    "focus": Outline.focus,
    "back": Outline.back,
    "unfocus": Outline.unfocus,
    "match": Outline.next_match,
}


class TreeScreen(KeyScreen):
    """An outline with title and status lines; subclasses say what the tree is."""

    TABLE = keys.TREE
    diff = False

    def __init__(self) -> None:
        super().__init__()
        self.hide_internals = True
        self.searching = False
        self.outline = Outline(self.build_tree(), diff=self.diff)
        self._page = 20

    def build_tree(self) -> Node:
        raise NotImplementedError

    def heading(self) -> str:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        yield Static(one_line(self.heading()), classes="title", id="title")
        yield Lines(self._provide, self._click, self._wheel, id="tree")
        yield Static("", classes="line", id="crumb")
        yield Static("", classes="line", id="status")
        yield Static(
            one_line(
                "↑↓ move  Enter open/close  f focus  b back  h frames  % heat  / search"
                "  a allocations  ? help  q back  Q quit"
            ),
            classes="hint",
        )

    def on_mount(self) -> None:
        self.redraw()

    def _provide(self, width: int, height: int) -> list[Text]:
        self._page = max(height - 1, 1)
        return self.outline.render(width, height, mono=self.app.no_color, heat=self.settings.heat)

    def _click(self, x: int, y: int) -> None:
        """Select the row; a click on the selected row opens or closes it."""
        o = self.outline
        row = o.scroll + y
        if row >= len(o.rows):
            return
        if row == o.cursor:
            o.toggle()
        else:
            o.cursor = row
        self.redraw()

    def _wheel(self, steps: int) -> None:
        self.outline.move(3 * steps)
        self.redraw()

    def status_text(self) -> str:
        o = self.outline
        n = o.current
        if self.searching or o.query:
            k, total = o.match_position()
            where = f"match {k}/{total}" if total else "no match"
            prompt = "/" + o.query + ("▏" if self.searching else "")
            return f"{prompt}   {where}   (n/N next/previous, Esc clears)"
        where = f"row {o.cursor + 1:,}/{len(o.rows):,} · " + self.row_figures(n)
        if o.focus_stack:
            where += f" · focused on {o.root.label} ({len(o.focus_stack)} deep, b back)"
        return where

    def row_figures(self, n: Node) -> str:
        """The cursor row's figures for the status line: its share of the whole tree, and
        of the focused subtree when there is one."""
        figures = format_bytes(n.value)
        for total in dict.fromkeys([self.outline.tree_root.value, self.outline.root.value]):
            if total:
                figures += f" · {n.value / total * 100:.1f}% of {format_bytes(total)}"
        return figures

    def redraw(self) -> None:
        super().redraw()
        crumb = breadcrumb(self.outline.current, max(self.size.width, 20))
        self.query_one("#crumb", Static).update(one_line(crumb))
        self.query_one("#status", Static).update(one_line(self.status_text()))
        self.query_one("#title", Static).update(one_line(self.heading()))

    def intercept(self, event: events.Key) -> bool:
        if not self.searching:
            return False
        o = self.outline
        if event.key == "escape":
            self.searching = False
            o.clear_search()
        elif event.key == "enter":
            self.searching = False
        elif event.key == "backspace":
            o.search(o.query[:-1])
        elif event.character and event.character.isprintable():
            o.search(o.query + event.character)
        else:
            return False
        self.redraw()
        return True

    # ---- actions ---------------------------------------------------------------------
    def do(self, name: str, args: list[int]) -> None:
        """An outline move (OUTLINE_ACTIONS) unless the screen has a do_<name> of its own."""
        move = OUTLINE_ACTIONS.get(name)
        if move is not None and not hasattr(self, f"do_{name}"):
            move(self.outline, *args)
        else:
            super().do(name, args)

    def do_page(self, n: int) -> None:
        self.outline.move(n * self._page)

    def do_heat(self) -> None:
        s = self.settings
        s.heat = HEAT_MODES[(HEAT_MODES.index(s.heat) + 1) % len(HEAT_MODES)]
        self.notify(f"heat colour and %: share of the {s.heat}", markup=False)

    def do_hide(self) -> None:
        self.hide_internals = not self.hide_internals
        old = self.outline
        labels = [n.label for n in old.current.ancestry()]
        self.outline = Outline(self.build_tree(), diff=self.diff)
        # stay on the same call site: follow the old path's labels where they still exist
        # (frames that are now hidden are skipped)
        node = self.outline.tree_root
        for label in labels:
            child = next((c for c in node.children if c.label == label), None)
            if child is not None:
                node = child
        self.outline.reveal(node)
        if old.query:
            self.outline.search(old.query)

    def do_search(self) -> None:
        self.searching = True
        self.outline.search("")

    def do_allocations(self) -> None:
        self.notify("no allocation list here", markup=False)

    def do_close(self) -> None:
        if self.outline.query:
            self.outline.clear_search()
        else:
            super().do_close()

    def do_close_or_back(self) -> None:
        """q, as in ptmem: out of the last focus first, then back to the screen below."""
        if self.outline.focus_stack:
            self.outline.back()
        else:
            self.do_close()


def _frames_note(hide: bool) -> str:
    return "user frames (h: all frames)" if hide else "all frames (h: user frames only)"


class LiveTreeScreen(TreeScreen):
    """What is alive right after an event, by call stack."""

    def __init__(self, dev: DeviceTrace, event: int) -> None:
        self.dev, self.event = dev, event
        super().__init__()

    def build_tree(self) -> Node:
        return live_stack_tree(self.dev, self.event, hide_internals=self.hide_internals)

    def heading(self) -> str:
        root = self.outline.tree_root
        t = event_time(self.dev, self.event)
        return (
            f"live after event {self.event:,}{' (' + t + ')' if t else ''}: "
            f"{format_bytes(root.value)} in {root.count:,} allocations · "
            f"{_frames_note(self.hide_internals)}"
        )

    def do_allocations(self) -> None:
        rows = rows_under(
            self.dev,
            self.dev.live_at(self.event),
            self.outline.current.path(),
            hide_internals=self.hide_internals,
        )
        label = self.outline.current.label
        self.app.push_screen(AllocationListScreen([("", self.dev, rows)], label))


class DiffScreen(TreeScreen):
    """Two snapshots' live trees merged by call path: what grew, what shrank."""

    diff = True

    def __init__(self, a: Session, event_a: int, b: Session, event_b: int, what: str = "") -> None:
        self.a, self.b, self.event_a, self.event_b, self.what = a, b, event_a, event_b, what
        super().__init__()

    def build_tree(self) -> Node:
        h = self.hide_internals
        self.live_a = live_stack_tree(self.a.dev, self.event_a, hide_internals=h)
        self.live_b = live_stack_tree(self.b.dev, self.event_b, hide_internals=h)
        return diff_tree(self.live_a, self.live_b, self.a.dev.snapshot, self.b.dev.snapshot)

    def do_allocations(self) -> None:
        """Both snapshots' allocations that the row accounts for (B's first)."""
        keys = [n.label for n in self.outline.current.ancestry()]
        parts = []
        for tag, s, event, tree in (
            ("B", self.b, self.event_b, self.live_b),
            ("A", self.a, self.event_a, self.live_a),
        ):
            live = s.dev.live_at(event)
            found = [
                rows_under(s.dev, live, n.path(), hide_internals=self.hide_internals)
                for n in matching_nodes(tree, keys, s.dev.snapshot)
            ]
            rows = np.unique(np.concatenate(found)) if found else live[:0]
            parts.append((tag, s.dev, rows))
        label = self.outline.current.label
        self.app.push_screen(AllocationListScreen(parts, label))

    def heading(self) -> str:
        root = self.outline.tree_root
        at = f"the peaks (A event {self.event_a:,}, B event {self.event_b:,})"
        if self.what != "peaks":
            at = f"A event {self.event_a:,} vs B event {self.event_b:,}"
        return (
            f"diff B - A at {at}: {signed_bytes(root.value)} "
            f"({format_bytes(root.before)} → {format_bytes(root.after)}) · "
            f"{_frames_note(self.hide_internals)}"
        )

    def row_figures(self, n: Node) -> str:
        count = f", {n.count:+,} allocations" if n.count else ""
        return (
            f"{signed_bytes(n.value)} ({format_bytes(n.before)} → {format_bytes(n.after)}{count})"
        )


class AllocationListScreen(TreeScreen):
    """The allocations under a tree node, largest first; Enter opens one. In compare, one
    list per snapshot."""

    def __init__(self, parts: list[tuple[str, DeviceTrace, np.ndarray]], label: str) -> None:
        self.parts, self.node_label = parts, label
        super().__init__()

    def build_tree(self) -> Node:
        if len(self.parts) == 1:
            _, dev, rows = self.parts[0]
            return allocation_list(dev, rows)
        return allocation_lists(self.parts)

    def on_mount(self) -> None:
        self.outline.expand_all()  # in compare: both lists open
        # on the (first list's) largest allocation, ready for Enter
        self.outline.move(1 if len(self.parts) == 1 else 2)
        super().on_mount()

    def heading(self) -> str:
        return f"allocations under {self.node_label} (largest first; Enter: details)"

    def do_allocations(self) -> None:
        n = self.outline.current
        if n.row >= 0 and n.dev is not None:
            self.app.push_screen(AllocationScreen(n.dev, n.row))
        else:
            self.outline.toggle()

    def do_open(self) -> None:
        """Enter on an allocation opens it (a list's rows have nothing to expand)."""
        self.do_allocations()

    def do_hide(self) -> None:
        self.notify("the list has no frames to hide", markup=False)

"""An expandable tree as a list of rows: navigation, focus, search and drawing, without Textual.

Only the rows of expanded nodes are ever listed, so a keypress costs the size of what is
shown, not of the tree. Search runs over a flat list of every label, built once per tree.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text

from memlens.units import format_bytes
from memlens.views.escape import visible
from memlens.views.tui.trees import Node

# heat by share (of the whole tree's total by default, or of the parent's): (upper bound,
# style, style without colour). By the total, the colour says how much of the memory a row
# holds wherever it is; by the parent, every only child would be red whatever its size.
# RGB, not ANSI names, which Textual's theme remaps (yellow and dark orange came out the same).
# Without colour (NO_COLOR) the heaviest rows are bold, the lightest dim, and the % is there.
HEAT = (
    (0.05, Style(dim=True), Style(dim=True)),
    (0.20, Style(color="#5fd75f"), Style()),
    (0.40, Style(color="#ffd700"), Style()),
    (0.70, Style(color="#ff8700"), Style(bold=True)),
    (2.00, Style(color="#ff3030", bold=True), Style(bold=True)),
)
GROWN, SHRUNK = Style(color="#ff5f5f"), Style(color="#5fd75f")
CURSOR = Style(reverse=True)
MATCH = Style(underline=True, bold=True)
DIM = Style(dim=True)
NARROW_DIFF = 70  # below this width a diff row shows only the change, not both sizes


def heat_style(share: float, mono: bool = False) -> Style:
    for bound, style, plain_style in HEAT:
        if share < bound:
            return plain_style if mono else style
    return HEAT[-1][2] if mono else HEAT[-1][1]


class Outline:
    """Cursor, expansion, focus stack and search over a tree of Node."""

    def __init__(self, root: Node, *, diff: bool = False, auto_expand: bool = True) -> None:
        self.tree_root = root
        self.diff = diff
        self.focus_stack: list[Node] = []
        self.expanded: set[int] = {id(root)}
        self.query = ""
        self.matches: list[Node] = []
        self._flat: list[tuple[Node, str]] | None = None
        self._order: dict[int, int] = {}  # id(node) -> position in the flat list
        self.cursor = 0
        self.scroll = 0
        if auto_expand:
            self._expand_chain(root)
        self._rows = self._list_rows()

    # ---- structure -------------------------------------------------------------------
    @property
    def root(self) -> Node:
        return self.focus_stack[-1] if self.focus_stack else self.tree_root

    @property
    def rows(self) -> list[tuple[Node, int]]:
        return self._rows

    @property
    def current(self) -> Node:
        return self._rows[self.cursor][0]

    def _expand_chain(self, node: Node) -> None:
        """Open the heaviest path while it is a single line of descent (no choice to make)."""
        n = node
        for _ in range(200):
            self.expanded.add(id(n))
            if len(n.children) != 1:
                break
            n = n.children[0]

    def _list_rows(self) -> list[tuple[Node, int]]:
        out: list[tuple[Node, int]] = []
        stack = [(self.root, 0)]
        while stack:
            n, d = stack.pop()
            out.append((n, d))
            if id(n) in self.expanded:
                stack.extend((c, d + 1) for c in reversed(n.children))
        return out

    def _refresh(self, keep: Node | None = None) -> None:
        keep = keep or self.current
        self._rows = self._list_rows()
        self.select(keep)

    def select(self, node: Node) -> bool:
        for i, (n, _) in enumerate(self._rows):
            if n is node:
                self.cursor = i
                return True
        self.cursor = min(self.cursor, len(self._rows) - 1)
        return False

    def reveal(self, node: Node) -> None:
        """Expand every ancestor of node (up to the focused root) and put the cursor on it."""
        p = node.parent
        while p is not None:
            self.expanded.add(id(p))
            if p is self.root:
                break
            p = p.parent
        self._refresh(node)

    # ---- moves -----------------------------------------------------------------------
    def move(self, delta: int) -> None:
        self.cursor = min(max(self.cursor + delta, 0), len(self._rows) - 1)

    def home(self) -> None:
        self.cursor = 0

    def end(self) -> None:
        self.cursor = len(self._rows) - 1

    def expand(self) -> None:
        """Open the node; if it is open already, go to its first child."""
        n = self.current
        if not n.children:
            return
        if id(n) in self.expanded:
            self.move(1)
        else:
            self.expanded.add(id(n))
            self._refresh(n)

    def collapse(self) -> None:
        """Close the node; if it is closed (or a leaf), go to its parent."""
        n = self.current
        if id(n) in self.expanded and n.children and n is not self.root:
            self.expanded.discard(id(n))
            self._refresh(n)
        else:
            self.parent()

    def toggle(self) -> None:
        n = self.current
        if id(n) in self.expanded and n is not self.root:
            self.expanded.discard(id(n))
        elif n.children:
            self.expanded.add(id(n))
        self._refresh(n)

    def expand_all(self) -> None:
        n = self.current
        self.expanded.update(id(x) for x in n.walk() if x.children)
        self._refresh(n)

    def collapse_all(self) -> None:
        n = self.current
        self.expanded.difference_update(id(x) for x in n.walk())
        if n is self.root:
            self.expanded.add(id(n))
        self._refresh(n)

    def parent(self) -> None:
        n = self.current
        if n is not self.root and n.parent is not None:
            self.select(n.parent)

    def first_child(self) -> None:
        n = self.current
        if n.children:
            self.expanded.add(id(n))
            self._refresh(n.children[0])

    def sibling(self, delta: int) -> None:
        n = self.current
        if n is self.root or n.parent is None:
            return
        sibs = n.parent.children
        i = next(k for k, s in enumerate(sibs) if s is n) + delta
        if 0 <= i < len(sibs):
            self.select(sibs[i])

    def focus(self) -> None:
        """Re-root the view at the cursor node (back() returns)."""
        n = self.current
        if n is self.root:
            return
        self.focus_stack.append(n)
        self.expanded.add(id(n))
        self._refresh(n)

    def back(self) -> None:
        if self.focus_stack:
            was = self.focus_stack.pop()
            self.reveal(was)

    def unfocus(self) -> None:
        if self.focus_stack:
            was = self.focus_stack[0]
            self.focus_stack.clear()
            self.reveal(was)

    # ---- search ----------------------------------------------------------------------
    def _flat_labels(self) -> list[tuple[Node, str]]:
        if self._flat is None:
            self._flat = [(n, n.label.lower()) for n in self.tree_root.walk()]
            self._order = {id(n): i for i, (n, _) in enumerate(self._flat)}
        return self._flat

    def _in_root(self, node: Node) -> bool:
        n: Node | None = node
        while n is not None:
            if n is self.root:
                return True
            n = n.parent
        return False

    def search(self, query: str) -> None:
        """Incremental search: matches in the focused subtree, cursor to the first one."""
        self.query = query
        q = query.lower()
        if not q:
            self.matches = []
            return
        self.matches = [n for n, lab in self._flat_labels() if q in lab and self._in_root(n)]
        if self.matches:
            self.reveal(self.matches[0])

    def next_match(self, delta: int = 1) -> None:
        """Next (delta=1) or previous (-1) match after/before the cursor, wrapping."""
        if not self.matches:
            return
        self._flat_labels()
        order = self._order
        here = order[id(self.current)]
        keyed = [(order[id(m)], m) for m in self.matches]
        if delta > 0:
            later = [m for k, m in keyed if k > here]
            target = later[0] if later else keyed[0][1]
        else:
            earlier = [m for k, m in keyed if k < here]
            target = earlier[-1] if earlier else keyed[-1][1]
        self.reveal(target)

    def clear_search(self) -> None:
        self.query = ""
        self.matches = []

    def match_position(self) -> tuple[int, int]:
        """(1-based index of the match under the cursor or 0, number of matches)."""
        cur = self.current
        for i, m in enumerate(self.matches):
            if m is cur:
                return i + 1, len(self.matches)
        return 0, len(self.matches)

    # ---- drawing ---------------------------------------------------------------------
    def render(
        self, width: int, height: int, mono: bool = False, heat: str = "total"
    ) -> list[Text]:
        """The visible window of rows, scrolled so the cursor is shown; `mono`: no colour;
        `heat`: a row's colour and % are its share of the "total" (the whole tree) or of
        its "parent"."""
        height = max(height, 1)
        if self.cursor < self.scroll:
            self.scroll = self.cursor
        elif self.cursor >= self.scroll + height:
            self.scroll = self.cursor - height + 1
        self.scroll = max(0, min(self.scroll, max(len(self._rows) - height, 0)))
        match_ids = {id(m) for m in self.matches}
        out = []
        for i in range(self.scroll, min(self.scroll + height, len(self._rows))):
            n, depth = self._rows[i]
            is_cursor, is_match = i == self.cursor, id(n) in match_ids
            out.append(self._row_text(n, depth, is_cursor, is_match, width, mono, heat))
        return out

    def share(self, n: Node, heat: str = "total") -> float:
        """The row's share of the whole tree's bytes, or of its parent's (heat="parent";
        the focused root is 100% of itself)."""
        if heat == "parent":
            total = n.parent.value if n.parent is not None and n is not self.root else n.value
        else:
            total = self.tree_root.value
        return n.value / total if total else 0.0

    def _row_text(
        self,
        n: Node,
        depth: int,
        is_cursor: bool,
        is_match: bool,
        width: int,
        mono: bool,
        heat: str,
    ) -> Text:
        if n.children:
            marker = "▾" if id(n) in self.expanded else "▸"
        else:
            marker = "·"
        indent = "  " * min(depth, 30)
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{indent}{marker} ")
        if self.diff:
            change = None if mono else GROWN if n.value > 0 else SHRUNK if n.value < 0 else None
            t.append(f"{signed_bytes(n.value):>12}", change)
            if width >= NARROW_DIFF:
                t.append(f"  {format_bytes(n.before):>10} → {format_bytes(n.after):>10}")
            t.append("  ")
        else:
            share = self.share(n, heat)
            style = heat_style(share, mono)
            t.append(f"{format_bytes(n.value):>11} {share * 100:5.1f}%", style)
            t.append(" ")
        t.append(visible(n.label), MATCH if is_match else None)
        if n.count and not self.diff:
            t.append(f"  ({n.count:,})", DIM)
        if is_cursor:
            t.stylize(CURSOR)
        t.truncate(width, overflow="ellipsis")
        return t


CRUMB_SEPARATOR = " › "


def breadcrumb(node: Node, width: int) -> str:
    """The path from the tree's root to `node` on one line; when it does not fit, the
    outer frames go first (the innermost ones tell rows apart)."""
    labels: list[str] = []
    n: Node | None = node
    while n is not None:
        labels.append(visible(n.label))
        n = n.parent
    text = CRUMB_SEPARATOR.join(reversed(labels))
    if len(text) <= width or width < 2:
        return text
    return "…" + text[len(text) - width + 1 :]


def signed_bytes(n: int) -> str:
    """'+1.00 MiB', '-2.00 KiB', '0 B': a change in bytes."""
    return ("+" if n > 0 else "") + format_bytes(n)


def plain(lines: list[Text]) -> str:
    """What a list of rows reads as, without styles (tests and NO_COLOR checks)."""
    return "\n".join(line.plain.rstrip() for line in lines)

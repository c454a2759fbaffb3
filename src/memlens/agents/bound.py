"""Bounded answers: a tool's JSON cut to what an agent's context can hold, with a note of
every cut.

A result is the command's --json (plain JSON: numbers, strings, lists, objects). Lists
longer than `items` keep their first `items` entries (every list memlens returns is
ranked, largest first), call-stack trees stop `depth` levels down, strings stop at `text`
characters. If the JSON is still over `chars` characters, lists are cut shorter, halving
until it fits. Nothing is cut when the result is small: then the answer is the --json.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Bounds:
    items: int = 50  # entries kept per list
    depth: int = 12  # levels of a call-stack tree ("children")
    text: int = 1000  # characters per string
    chars: int = 100_000  # characters of the whole answer


class _Cuts:
    """Cuts by where they happened, list indices folded (`stages[].grew`) and a tree's
    levels too (`tree.children[]`), so a note stays one line however many lists were cut."""

    def __init__(self) -> None:
        self.where: dict[tuple[str, str], list[int]] = {}

    def add(self, kind: str, path: str, size: int) -> None:
        folded = re.sub(r"(\.children\[\])+", ".children[]", re.sub(r"\[\d+\]", "[]", path))
        key = (kind, folded or "(top)")
        self.where.setdefault(key, []).append(size)

    def notes(self, bounds: Bounds) -> list[str]:
        out = []
        for (kind, path), sizes in self.where.items():
            times = f" (in {len(sizes):,} places)" if len(sizes) > 1 else ""
            if kind == "list":
                out.append(f"{path}: {max(sizes):,} entries, first {bounds.items} kept{times}")
            elif kind == "tree":
                out.append(f"{path}: call-stack tree cut {bounds.depth} levels down{times}")
            else:
                out.append(f"{path}: text of {max(sizes):,} characters cut to {bounds.text}{times}")
        return out


def _cut(value: Any, bounds: Bounds, cuts: _Cuts, path: str, depth: int) -> Any:
    if isinstance(value, str):
        if len(value) > bounds.text:
            cuts.add("text", path, len(value))
            return value[: bounds.text] + "…"
        return value
    if isinstance(value, list):
        if len(value) > bounds.items:
            cuts.add("list", path, len(value))
        return [
            _cut(v, bounds, cuts, f"{path}[{i}]", depth)
            for i, v in enumerate(value[: bounds.items])
        ]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, v in value.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "children" and isinstance(v, list):
                if depth >= bounds.depth:
                    if v:
                        cuts.add("tree", path, depth)
                    out[key] = []
                    continue
                out[key] = _cut(v, bounds, cuts, where, depth + 1)
            else:
                out[key] = _cut(v, bounds, cuts, where, depth)
        return out
    return value


def bound(result: Any, bounds: Bounds) -> tuple[Any, list[str]]:
    """`result` (plain JSON) within `bounds`, and one note per kind of cut (empty: whole)."""
    current = bounds
    while True:
        cuts = _Cuts()
        out = _cut(result, current, cuts, "", 0)
        size = len(json.dumps(out, separators=(",", ":")))
        if size <= bounds.chars or current.items <= 1:
            break
        current = replace(current, items=current.items // 2)
    notes = cuts.notes(current)
    if size > bounds.chars:
        notes.append(f"still {size:,} characters with every list cut to one entry")
    if notes:
        notes.append(
            "ask for less (top, depth, event, a name or stage filter) to see the rest, or "
            "start the server with larger --max-items/--max-chars"
        )
    return out, notes

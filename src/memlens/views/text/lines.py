"""The building blocks of every command's text: tables, call-site lists, trees, elision.

Shared by the renderers in this package so every command prints sites, trees and tables
the same way (the --json output is the analysis result itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from memlens.units import format_bytes

# what a renderer gets as `options` when called without any (a renderer of the registry
# is render(result, options): the command's option values, by name)
NO_OPTIONS: Mapping[str, Any] = MappingProxyType({})


def signed_bytes(n: int) -> str:
    """A change in bytes: "+1.00 KiB", "-10 B", "0 B" (the HTML report has its own)."""
    return ("+" if n > 0 else "") + format_bytes(n)


def sites_lines(sites: Sequence[Mapping[str, Any]], indent: str = "  ") -> list[str]:
    return [
        f"{indent}{format_bytes(s['bytes']):>12}  {s['count']:>7,}x  {s['site']}{via_text(s)}"
        for s in sites
    ]


def via_text(site: Mapping[str, Any]) -> str:
    """ "  via einsum (.../einops/_backends.py:288)": the glue the site's line called
    through (a Site's "via"), or ""."""
    via = site.get("via")
    return f"  via {via}" if via else ""


def tree_lines(
    tree: Mapping[str, Any] | None, *, max_lines: int = 60, indent: str = "  "
) -> list[str]:
    """An indented tree (outermost frame first), largest child first, bytes at every level."""
    if not tree:
        return []
    out: list[str] = []

    def walk(node: Mapping[str, Any], depth: int) -> None:
        if len(out) >= max_lines:
            return
        out.append(
            f"{indent}{format_bytes(node['bytes']):>12}  {'  ' * depth}{node['label']}"
            f"  ({node['count']:,})"
        )
        kids = node.get("children") or []
        # a single child continues the same chain: no extra indent wasted on it
        for c in kids:
            walk(c, depth + 1)

    walk(tree, 0)
    if len(out) >= max_lines:
        out.append(f"{indent}... (truncated; use --json for the whole tree)")
    return out


def table_lines(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "  "
) -> list[str]:
    """A simple left/right aligned text table (numbers right-aligned)."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def numeric(i: int) -> bool:
        return all(_looks_numeric(r[i]) for r in cells[1:]) and len(cells) > 1

    right = [numeric(i) for i in range(len(headers))]
    lines = []
    for r in cells:
        lines.append(
            indent
            + "  ".join(
                r[i].rjust(widths[i]) if right[i] else r[i].ljust(widths[i])
                for i in range(len(headers))
            ).rstrip()
        )
    return lines


def _looks_numeric(s: str) -> bool:
    t = s.replace(",", "").replace("+", "").replace("-", "").replace("%", "").strip()
    t = t.split(" ")[0]
    try:
        float(t)
        return True
    except ValueError:
        return t in ("", "None")


def groups_lines(kind: str, groups: Sequence[Mapping[str, Any]]) -> list[str]:
    """Categories and rules alike: a table of bytes at the event, own peak and bytes
    allocated per group, then each group's top sites."""
    lines = table_lines(
        [kind, "at event", "count", "own peak", "allocated in trace"],
        [
            [
                g["name"],
                format_bytes(g["bytes"]),
                f"{g['count']:,}",
                format_bytes(g["peak_bytes"]),
                format_bytes(g["allocated_bytes"]),
            ]
            for g in groups
        ],
    )
    for g in groups:
        if g.get("top_sites"):
            lines += ["", f"{g['name']}:", *sites_lines(g["top_sites"])]
    return lines


def when_text(event: int) -> str:
    return "before the first event" if event < 0 else f"after event {event:,}"


def elide(items: list[Any], head: int, tail: int = 0) -> tuple[list[Any], int]:
    """(items to show, how many were left out): the first `head` and last `tail`."""
    if len(items) <= head + tail:
        return list(items), 0
    return list(items[:head]) + (list(items[-tail:]) if tail else []), len(items) - head - tail

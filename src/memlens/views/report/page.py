"""HTML building blocks for the report: escaping, tables, the JSON data island, the page.

Every string that may come from the user's program (frame names, file names, annotation
names, metadata, rule names) goes through `esc` here, or into the JSON data island, which
the page's script reads with JSON.parse and inserts with textContent only.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from importlib import resources
from typing import Any, TypeVar

from memlens.analysis.jsonable import json_default
from memlens.units import format_bytes

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def esc(value: Any) -> str:
    """HTML-escape anything (quotes too, so the result is safe inside attributes); a lone
    surrogate (pickle strings may hold one, UTF-8 cannot) is shown as its escape."""
    return html.escape(_SURROGATE.sub(_escape_surrogate, str(value)), quote=True)


def bytes_text(n: Any) -> str:
    """Plain text (for note(), which escapes): '1.50 GiB', '-' for None."""
    return format_bytes(int(n)) if n is not None else "-"


def fmt_bytes(n: Any) -> str:
    return esc(format_bytes(int(n))) if n is not None else "&ndash;"


def delta_text(n: int) -> str:
    """Plain text (for note() and figure sub-lines, which escape): '+1.00 MiB', '-512 B', '0 B'."""
    return ("+" if n > 0 else "") + format_bytes(n)


def fmt_delta(n: Any) -> str:
    """Signed byte change: '+1.00 MiB', '-512 B', '0 B'."""
    if n is None:
        return "&ndash;"
    n = int(n)
    cls = "up" if n > 0 else "down" if n < 0 else "same"
    return f'<span class="{cls}">{esc(delta_text(n))}</span>'


def fmt_int(n: Any) -> str:
    return "&ndash;" if n is None else f"{int(n):,}"


def site_code(site: Any) -> str:
    """A call site or path as code that wraps at '/' (a line break inside a file name is
    hard to read): <wbr> after each slash, added after escaping."""
    return f"<code>{esc(site).replace('/', '/<wbr>')}</code>"


def note(text: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{esc(text)}</p>'


class Cell:
    """A table cell whose HTML is already safe (built with esc/fmt_*); `num` right-aligns."""

    __slots__ = ("html", "num")

    def __init__(self, html_text: str, num: bool = False) -> None:
        self.html = html_text
        self.num = num


def num(html_text: str) -> Cell:
    return Cell(html_text, num=True)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    cls: str = "",
    numeric: Sequence[int] = (),
    empty: str = "nothing to show",
) -> str:
    """A table; plain values are escaped, Cell values are trusted HTML from this package."""
    numeric_cols = set(numeric)
    head = "".join(
        f'<th class="num">{esc(h)}</th>' if i in numeric_cols else f"<th>{esc(h)}</th>"
        for i, h in enumerate(headers)
    )
    body = []
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            if isinstance(v, Cell):
                klass = ' class="num"' if v.num or i in numeric_cols else ""
                cells.append(f"<td{klass}>{v.html}</td>")
            else:
                klass = ' class="num"' if i in numeric_cols else ""
                cells.append(f"<td{klass}>{esc('' if v is None else v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    if not body:
        return note(empty)
    return (
        f'<div class="tablewrap"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def figures(items: Sequence[tuple[str, str, str]]) -> str:
    """Headline figures: (label, value html, sub-line text)."""
    cards = "".join(
        f'<div class="fig"><div class="fig-label">{esc(label)}</div>'
        f'<div class="fig-value">{value}</div><div class="fig-sub">{esc(sub)}</div></div>'
        for label, value, sub in items
    )
    return f'<div class="figures">{cards}</div>'


def json_island(element_id: str, data: Any) -> str:
    """JSON in a non-executed script element. Every `<`, `>` and `&` is written as its
    JSON escape (`\\u003c`...), which JSON.parse turns back into the same character: no
    string can close the element or open a comment (`</script>`, `<!--`), and every
    string round-trips exactly. (They can only occur inside JSON strings.)"""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, default=json_default)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    # U+2028/2029 are valid in JSON strings but end a line in older JavaScript parsers
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    # a lone surrogate cannot be written as UTF-8, but its JSON escape parses back to it
    text = _SURROGATE.sub(_escape_surrogate, text)
    return f'<script type="application/json" id="{esc(element_id)}">{text}</script>'


@cache
def asset(name: str) -> str:
    """A file from templates/ (CSS, JS, page skeleton), read once."""
    return (
        resources.files("memlens.views.report")
        .joinpath("templates")
        .joinpath(name)
        .read_text("utf-8")
    )


R = TypeVar("R")


def sectioned_page(
    title: str,
    header_html: str,
    sections: Sequence[tuple[str, str, Callable[[R], str | None]]],
    result: R,
) -> str:
    """A page of (id, heading, section) over one result (a fleet's, a plan's), with no
    data island: a section that returns None is left out, and out of the nav."""
    parts: list[str] = []
    nav: list[tuple[str, str]] = []
    for sid, heading, fn in sections:
        body = fn(result)
        if body is None:
            continue
        nav.append((sid, heading))
        parts.append(f'<section id="{sid}"><h2>{esc(heading)}</h2>{body}</section>')
    return render_page(
        title=title, header_html=header_html, nav=nav, body_html="".join(parts), data={}
    )


def render_page(
    *,
    title: str,
    header_html: str,
    nav: Sequence[tuple[str, str]],
    body_html: str,
    data: dict[str, Any],
) -> str:
    """The whole self-contained document: inline CSS, inline JS, one JSON data island."""
    nav_html = "".join(f'<a href="#{esc(sid)}">{esc(label)}</a>' for sid, label in nav)
    from memlens import __version__

    parts = {
        "VERSION": esc(__version__),
        "TITLE": esc(title),
        "CSS": asset("report.css"),
        "HEADER": header_html,
        "NAV": nav_html,
        "BODY": body_html,
        "DATA": json_island("memlens-data", data),
        "JS": asset("report.js"),
    }
    # One pass over the skeleton only: a "{{JS}}" inside a user's frame name is never expanded
    return _PLACEHOLDER.sub(lambda m: parts[m.group(1)], asset("report.html"))


_PLACEHOLDER = re.compile(r"\{\{([A-Z]+)\}\}")

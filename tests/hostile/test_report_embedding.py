"""The report embeds its data so that every string round-trips (issue 16, point 6): a name
with `<!--` or `</script>` used to become `<\\!--`, invalid JSON, and the page's
interactive parts died."""

from __future__ import annotations

import json
import re

import pytest
from corpus import HOSTILE_TEXT

from memlens.views.report.page import json_island

NASTY = [
    *HOSTILE_TEXT.values(),
    "<!--",
    "</script>",
    "</SCRIPT >",
    "<!-- <script>",
    "-->",
    "<\\/",
    "\\u003c",
    "a & b > c",
    "\u2028\u2029",
    "]]>",
]


@pytest.mark.parametrize("s", NASTY)
def test_every_string_round_trips_and_nothing_escapes_the_element(s):
    island = json_island("memlens-data", {"name": s, s: [s, {"k": s}]})
    m = re.fullmatch(
        r'<script type="application/json" id="memlens-data">(.*)</script>', island, re.S
    )
    assert m, island
    body = m.group(1)
    assert "<" not in body and ">" not in body  # nothing an HTML parser could act on
    assert json.loads(body) == {"name": s, s: [s, {"k": s}]}  # what JSON.parse would see

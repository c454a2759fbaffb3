"""Hostile strings from the snapshot (frame names, file names, annotation names, settings)
never reach the page as markup: escaped in HTML, or inside the JSON data island."""

from __future__ import annotations

import json
import re

from report_snapshots import EVIL_FILE, EVIL_NAME, EVIL_STAGE, step_snapshot

import memlens
from memlens.views.report import build_report
from memlens.views.report.page import json_island, table

ISLAND = re.compile(r'<script type="application/json" id="memlens-data">(.*?)</script>', re.S)


def hostile_report() -> str:
    raw = step_snapshot(evil=True)
    raw["allocator_settings"]["PYTORCH_CUDA_ALLOC_CONF"] = "<svg onload=alert(4)>"
    text, _ = build_report(memlens.load(raw, cache=False))
    return text


def test_no_raw_hostile_markup_outside_the_data_island():
    text = hostile_report()
    outside = ISLAND.sub("", text)
    for bad in (
        EVIL_NAME,
        "<script>alert",
        "<svg onload",
        "</script><script>",
        "onerror=alert(1)>",
    ):
        assert bad not in outside
    # the hostile frame is the call site of B: it is shown, escaped
    assert "&lt;img src=x onerror=alert(1)&gt;" in outside
    assert "&lt;svg onload=alert(4)&gt;" in outside
    # exactly the scripts we wrote: the data island and the page script
    assert outside.count("<script") == 1


def test_data_island_cannot_be_closed_from_inside():
    text = hostile_report()
    found = ISLAND.search(text)
    assert found is not None
    body = found.group(1)
    assert "</" not in body and "<!--" not in body
    # ... yet the strings are all there, intact, for the script to insert with textContent
    data = json.loads(body)
    (train,) = data["trees"]["peak"]["python"]["k"]
    evil = [k for k in train["k"] if k.get("f") == f"{EVIL_FILE}:5"]
    assert len(evil) == 1 and evil[0]["n"].startswith(EVIL_NAME)


def test_placeholders_in_user_strings_are_not_expanded():
    raw = step_snapshot(evil=True)
    raw["device_traces"][0][2]["frames"][1]["name"] = "{{JS}}{{CSS}}{{DATA}}"
    text, _ = build_report(memlens.load(raw, cache=False))
    assert text.count('id="memlens-data"') == 1
    assert text.count("Every string from the snapshot is inserted with textContent") == 1


def test_helpers_escape():
    assert "&lt;b&gt;" in table(["<h>"], [["<b>"]]) and "&lt;h&gt;" in table(["<h>"], [["<b>"]])
    island = json_island("x", {"s": "</script><!-- \u2028"})
    assert island.count("</script>") == 1 and "<!--" not in island and "\u2028" not in island


def test_stage_name_is_never_markup_even_when_stages_are_drawn():
    text = hostile_report()
    assert EVIL_STAGE not in ISLAND.sub("", text)


def test_hostile_rule_names_patterns_and_paths(tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text(
        json.dumps(
            {"rules": [{"name": "<b onmouseover=alert(5)>x</b>", "pattern": "model|</script>"}]}
        )
    )
    raw = step_snapshot(evil=True)
    text, problems = build_report(
        memlens.load(raw, cache=False), rules_path=str(rules), names=("<i>a</i>.pickle", None)
    )
    assert not [p for p in problems if p.startswith("Rules")]
    outside = ISLAND.sub("", text)
    assert "<b onmouseover" not in outside and "<i>a</i>" not in outside
    assert "&lt;b onmouseover=alert(5)&gt;x&lt;/b&gt;" in outside
    assert "model|&lt;/script&gt;" in outside
    assert "&lt;i&gt;a&lt;/i&gt;.pickle" in outside
    # the stages table shows the hostile annotation name, escaped
    stages = outside.split('<section id="stages">')[1].split("</section>")[0]
    assert "&lt;script&gt;alert(3)&lt;/script&gt;{{JS}}" in stages

"""The analysis-backed sections on hand-built snapshots: the figures the reader sees."""

from __future__ import annotations

import html
import json
import re

import pytest
from report_snapshots import MiB, step_snapshot, steps_snapshot, with_oom

import memlens
from memlens.views.report import build_report

ISLAND = re.compile(r'<script type="application/json" id="memlens-data">(.*?)</script>', re.S)


def section(text: str, sid: str) -> str:
    return text.split(f'<section id="{sid}">')[1].split("</section>")[0]


def rows(html_text: str) -> list[list[str]]:
    """Table rows as lists of cell texts (tags stripped, entities decoded)."""
    out = []
    for tr in re.findall(r"<tr>(.*?)</tr>", html_text, re.S):
        cells = re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", tr, re.S)
        out.append([html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells])
    return out


@pytest.fixture(scope="module")
def step_report():
    text, problems = build_report(memlens.load(step_snapshot(evil=False), cache=False))
    assert problems == []
    return text


@pytest.fixture(scope="module")
def steps_report():
    text, problems = build_report(memlens.load(steps_snapshot(), cache=False))
    assert problems == []
    return text


def test_stage_row_and_band(step_report):
    # the stage [1000, 1003] holds events stamped 1001..1003: events 1..3
    body = rows(section(step_report, "stages"))
    assert body[0][:8] == [
        "stage",
        "events",
        "at start",
        "at end",
        "peak inside",
        "allocated",
        "freed",
        "net",
    ]
    assert body[1][:8] == [
        "forward",
        "1\u20133",
        "0 B",
        "6.00 MiB",
        "6.00 MiB",
        "6.00 MiB",
        "0 B",
        "+6.00 MiB",
    ]
    found = ISLAND.search(step_report)
    assert found is not None
    data = json.loads(found.group(1))
    assert data["timelines"][0]["stages"] == [[1, 3, "forward"]]
    assert 'class="stage-band d0"' in section(step_report, "timeline")


def test_repeated_steps_compared(steps_report):
    body = section(steps_report, "stages")
    assert "Repeated stage ProfilerStep: 3 times" in body
    steps = [r for r in rows(body) if r and r[0].startswith("ProfilerStep#")]
    # main table (3 rows) then the step comparison (3 rows): step, peak, vs previous, ...
    compare = steps[3:]
    assert [r[:3] for r in compare] == [
        ["ProfilerStep#1", "2.00 MiB", "\u2013"],
        ["ProfilerStep#2", "3.00 MiB", "+1.00 MiB"],
        ["ProfilerStep#3", "4.00 MiB", "+1.00 MiB"],
    ]


def test_repeats_of_one_stage_name_are_numbered_as_in_the_text():
    snap = steps_snapshot()
    for a in snap["external_annotations"]:
        a["name"] = "train"  # one name for the three steps: occurrences 0, 1, 2
    text, problems = build_report(memlens.load(snap, cache=False))
    assert problems == []
    names = [r[0] for r in rows(section(text, "stages")) if r and r[0].startswith("train")]
    assert names == ["train", "train [1]", "train [2]"] * 2  # stage table, then the steps


def test_leaks_section(steps_report):
    body = section(steps_report, "leaks")
    assert "ProfilerStep: 3 occurrences" in body
    figs = re.findall(r'<div class="fig-value">(.*?)</div>', body)
    assert [re.sub(r"<[^>]+>", "", f) for f in figs[:2]] == ["+2.00 MiB", "+1.00 MiB"]
    subs = re.findall(r'<div class="fig-sub">(.*?)</div>', body)
    assert subs[:2] == ["first start to last start", "average; +1.00 MiB after the first"]
    grew = [r for r in rows(body) if r and r[0] == "remember (/home/u/cache.py:7)"]
    assert grew and grew[-1][1] == "+2.00 MiB"


def test_categories_add_up_to_the_peak(step_report):
    body = rows(section(step_report, "categories"))
    at_peak = sum(_mib(r[1]) for r in body[1:])
    assert at_peak == pytest.approx(6.0)
    assert {r[0] for r in body[1:]} <= {
        "parameter",
        "gradient",
        "optimizer_state",
        "activation",
        "temporary",
        "autograd",
        "other",
    }


def _mib(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"B": 1 / MiB, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[unit]


def test_rules_section(tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("fwd: 'model\\.py:20'\nbwd: backward\n")
    text, problems = build_report(
        memlens.load(step_snapshot(evil=False), cache=False), rules_path=str(rules)
    )
    assert not [p for p in problems if p.startswith("Rules")]
    body = {r[0]: r for r in rows(section(text, "rules"))}
    assert body["fwd"][2:5] == ["4.00 MiB", "66.7%", "2"]
    assert body["bwd"][2:5] == ["2.00 MiB", "33.3%", "1"]
    # without --rules there is no rules section at all
    plain, _ = build_report(memlens.load(step_snapshot(evil=False), cache=False))
    assert '<section id="rules">' not in plain


def test_bad_rules_file_is_a_note_and_a_problem(tmp_path):
    rules = tmp_path / "rules.json"
    rules.write_text('{"broken": "("}')
    text, problems = build_report(
        memlens.load(step_snapshot(evil=False), cache=False), rules_path=str(rules)
    )
    assert [p for p in problems if p.startswith("Rules")]
    assert "Not available:" in section(text, "rules")


def test_oom_section_only_when_present(step_report):
    assert '<section id="oom">' not in step_report
    text, _ = build_report(memlens.load(with_oom(step_snapshot(evil=False)), cache=False))
    body = section(text, "oom")
    assert "Out of memory at event 9" in body
    figs = [
        re.sub(r"<[^>]+>", "", f) for f in re.findall(r'<div class="fig-value">(.*?)</div>', body)
    ]
    assert figs[:4] == ["100.00 MiB", "1.00 MiB", "2.00 MiB", "8.00 MiB"]
    assert "The failing request came from forward (/home/u/model.py:20)." in body


def test_allocator_state_at_peak_and_end(step_report):
    body = rows(section(step_report, "allocator"))
    by_when = {r[0]: r for r in body[1:]}
    peak = by_when["at the peak of active memory"]
    assert peak[1:4] == ["3", "8.00 MiB", "6.00 MiB"]
    end = by_when["at the end"]
    assert end[1:4] == ["8", "8.00 MiB", "2.00 MiB"]


def test_diff_of_two_snapshots():
    a = memlens.load(step_snapshot(evil=False), cache=False)
    b = memlens.load(step_snapshot(evil=False, scale=2), cache=False)
    text, problems = build_report(a, b, names=("a.pickle", "b.pickle"))
    assert not [p for p in problems if p.startswith("Diff")]
    body = section(text, "diff")
    figures = {r[0]: r for r in rows(body)}
    assert figures["peak active"][1:5] == ["6.00 MiB", "12.00 MiB", "+6.00 MiB", "+100.00%"]
    assert figures["trace entries"][1:4] == ["9", "9", "+0"]
    sites = {r[0]: r for r in rows(body)}
    assert sites["forward (/home/u/model.py:20)"][1:5] == [
        "4.00 MiB",
        "8.00 MiB",
        "+4.00 MiB",
        "2 \u2192 2",
    ]
    assert sites["backward (/home/u/model.py:40)"][1:4] == ["2.00 MiB", "4.00 MiB", "+2.00 MiB"]
    stage = sites["forward"]
    assert stage[1:4] == ["6.00 MiB", "12.00 MiB", "+6.00 MiB"]
    # B's own timeline is drawn too
    found = ISLAND.search(text)
    assert found is not None
    data = json.loads(found.group(1))
    by_svg = {t["svg"]: t for t in data["timelines"]}
    assert sorted(by_svg) == ["timeline-a", "timeline-b"]
    assert max(by_svg["timeline-b"]["curves"]["amax"]) == 12 * MiB
    assert text.index('<section id="diff">') < text.index('<section id="timeline">')


def test_several_devices_and_device_choice():
    from memlens.simulation.synthetic import generate_trace_dict
    from memlens.units import format_bytes

    snap = memlens.load(generate_trace_dict(events=2000, devices=2, seed=3), cache=False)
    text, problems = build_report(snap, device=1)
    assert problems == []
    body = rows(section(text, "devices"))
    assert [r[0] for r in body[1:]] == ["device 0", "device 1 (this report)"]
    assert body[2][2] == format_bytes(snap.device(1).peak_active_bytes)
    assert "This report shows device 1; the snapshot also has device(s) 0" in section(
        text, "overview"
    )
    assert "&middot; device 1" in text.split("</header>")[0]
    single, _ = build_report(memlens.load(step_snapshot(evil=False), cache=False))
    assert '<section id="devices">' not in single

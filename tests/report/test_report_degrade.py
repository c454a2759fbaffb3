"""A section that fails becomes a one-line note and a `problems` entry (never a crash);
the rest of the report is unaffected."""

from __future__ import annotations

import pytest
from report_snapshots import step_snapshot

import memlens
from memlens.views.report import build_report


@pytest.fixture(scope="module")
def snap():
    return memlens.load(step_snapshot(evil=False), cache=False)


def section(text: str, sid: str) -> str:
    return text.split(f'<section id="{sid}">')[1].split("</section>")[0]


def test_broken_analysis_becomes_a_note_and_a_problem(snap, monkeypatch):
    def boom(ctx):
        raise RuntimeError("kaboom <b>")

    from memlens.views.report.sections import categories

    monkeypatch.setattr(categories.SECTION, "fn", boom)
    text, problems = build_report(snap)
    assert [p for p in problems if p.startswith("Categories")] == [
        "Categories: RuntimeError: kaboom <b>"
    ]
    body = section(text, "categories")
    assert "Not available: this section failed (RuntimeError: kaboom &lt;b&gt;)." in body
    # the others are still there
    assert "timeline-a" in section(text, "timeline") and "data-icicle" in section(text, "peak")


def test_layout_failure_keeps_the_curves(snap, monkeypatch):
    from memlens.views.report import bands

    def broken(*a, **k):
        raise ValueError("layout broke")

    monkeypatch.setattr(bands, "layout_view", broken)
    text, problems = build_report(snap)
    assert problems == ["timeline allocation bands: ValueError: layout broke"]
    assert 'class="active-max"' in section(text, "timeline")

"""The report opened in real headless Chromium: it draws, it is interactive, it fetches
nothing, and hostile strings stay text. Screenshots go to artifacts/report/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from report_snapshots import EVIL_NAME, EVIL_STAGE, step_snapshot, write

from chromium import BROWSER_MARKS
from memlens.views.report import write_report
from snapshot_builders import wrapped_snapshot

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "report"

pytestmark = BROWSER_MARKS


class Opened:
    """A page on a report, recording every request, console message, error and dialog."""

    def __init__(self, browser, html_path: Path, scheme: str = "light") -> None:
        self.url = html_path.resolve().as_uri()
        self.page = browser.new_page(viewport={"width": 1280, "height": 900}, color_scheme=scheme)
        self.requests: list[str] = []
        self.console: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.console.append(f"pageerror: {e}"))
        self.page.on("dialog", self._dismiss)
        self.page.goto(self.url)
        self.page.wait_for_load_state("load")

    def _dismiss(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_clean(self) -> None:
        assert self.requests == [self.url], "the report must load nothing but itself"
        assert self.console == []
        assert self.dialogs == []

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def hover_timeline(page, fraction: float, svg: str = "#timeline-a") -> str:
    page.locator(svg).scroll_into_view_if_needed()
    box = page.locator(svg).bounding_box()
    # the plot starts at x=72 of 1000 viewBox units; aim inside it
    x = box["x"] + box["width"] * (0.072 + 0.92 * fraction)
    page.mouse.move(x, box["y"] + box["height"] * 0.5)
    tip = page.locator("#tooltip")
    assert tip.is_visible()
    return tip.text_content() or ""


def test_hostile_report_in_chromium(browser, tmp_path):
    out = write_report(
        write(step_snapshot(evil=True), tmp_path / "evil.pickle"), tmp_path / "evil.html"
    )
    o = Opened(browser, out)
    page = o.page
    # timeline drawn: the active area path has real geometry
    d = page.locator("#timeline-a .active-max").get_attribute("d")
    assert d.startswith("M") and d.count("H") == 9
    # hovering the 4th event (the peak) reports its exact figure
    text = hover_timeline(page, 3.5 / 9)
    assert "event 3" in text and "active 6.00 MiB" in text and "peak" in text
    assert f"in stage {EVIL_STAGE}" in text  # the hostile stage name, shown as text
    # the largest allocations are bands; B's (2 MiB) names the hostile frame, as text
    bands = page.locator("#timeline-a [data-band]")
    assert bands.count() == 3
    tips = []
    for i in range(3):
        bands.nth(i).locator("rect").first.hover()
        tips.append(page.locator("#tooltip").text_content())
    evil = [t for t in tips if t.startswith("allocation of 2.00 MiB")]
    assert (
        len(evil) == 1
        and f"{EVIL_NAME} (" in evil[0]
        and "allocated at event 2, alive at the end" in evil[0]
    )
    # the hostile frame name is in an icicle cell as text; nothing was injected
    cells = page.locator("#peak .cell")
    assert cells.count() >= 4
    assert page.locator("#peak .cell", has_text=EVIL_NAME).count() == 1
    assert page.locator("img").count() == 0
    assert page.evaluate("document.scripts.length") == 2
    assert EVIL_STAGE not in page.content().split('id="memlens-data"')[0]
    o.shot("hostile.png")
    o.assert_clean()


def test_icicle_zoom_and_views(browser, tmp_path):
    out = write_report(write(step_snapshot(evil=False), tmp_path / "s.pickle"), tmp_path / "s.html")
    o = Opened(browser, out)
    page = o.page
    ic = page.locator("#peak .icicle")
    crumbs = page.locator("#peak .crumbs")
    assert crumbs.text_content() == "all"
    # hover gives bytes and share
    page.locator("#peak .cell", has_text="forward (model.py:20)").hover()
    tip = page.locator("#tooltip").text_content()
    assert "4.00 MiB" in tip and "66.7% of the total" in tip and "2 allocations" in tip
    # click to zoom: forward fills the width, its parents stay as breadcrumbs
    page.locator("#peak .cell", has_text="forward (model.py:20)").click()
    assert crumbs.text_content() == "all > train_step (train.py:10) > forward (model.py:20)"
    width = ic.bounding_box()["width"]
    fwd = page.locator(
        "#peak .cell:not(.ancestor)", has_text="forward (model.py:20)"
    ).bounding_box()
    assert fwd["width"] > width * 0.95
    assert page.locator("#peak .cell", has_text="backward").count() == 0
    # breadcrumb back to the root
    crumbs.locator("a", has_text="all").click()
    assert crumbs.text_content() == "all"
    assert page.locator("#peak .cell", has_text="backward").count() == 1
    # the all-frames view is a different tree with the same total
    page.locator("#peak button[data-view=all]").click()
    assert page.locator("#peak button[data-view=all]").get_attribute("aria-pressed") == "true"
    assert page.locator("#peak .cell").first.text_content().startswith("all")
    o.assert_clean()


@pytest.mark.slow
def test_real_snapshot_report(browser, shared_snapshots_dir, tmp_path):
    src = shared_snapshots_dir / "cs336_memory_ctx256_fullstep.pickle"
    out = write_report(src, tmp_path / "real.html")
    for scheme in ("light", "dark"):
        o = Opened(browser, out, scheme)
        page = o.page
        assert int(page.locator("#peak .icicle").get_attribute("data-cells")) > 5
        text = hover_timeline(page, 0.999)
        assert "active" in text and "reserved" in text
        o.shot(f"real-{scheme}.png")
        o.assert_clean()


def test_diff_report_in_chromium(browser, tmp_path):
    a = write(step_snapshot(evil=False), tmp_path / "a.pickle")
    b = write(step_snapshot(evil=False, scale=2), tmp_path / "b.pickle")
    out = write_report(a, tmp_path / "diff.html", snapshot2=b)
    o = Opened(browser, out)
    page = o.page
    # every section but the diff describes A, and says so
    assert page.locator("nav a").first.text_content() == "Overview (A)"
    assert page.locator("nav a", has_text="Diff: A vs B").count() == 1
    assert page.locator("#timeline h2").text_content() == "Timeline (A)"
    assert page.locator(".page-header .source").text_content().startswith("A: ")
    # both timelines answer the mouse, each with its own figures
    assert "active 6.00 MiB" in hover_timeline(page, 3.5 / 9, "#timeline-a")
    assert "active 12.00 MiB" in hover_timeline(page, 3.5 / 9, "#timeline-b")
    o.shot("diff.png")
    o.assert_clean()


def test_real_diff_report_in_chromium(browser, shared_snapshots_dir, expected_figures, tmp_path):
    """The two real training steps compared: small, clean, and the diff's figures are the
    published ones (A = context 128, B = context 256)."""
    a_name, b_name = "cs336_memory_ctx128_fullstep.pickle", "cs336_memory_ctx256_fullstep.pickle"
    out = write_report(shared_snapshots_dir / a_name, tmp_path / "diff.html",
                       snapshot2=shared_snapshots_dir / b_name)  # fmt: skip
    assert out.stat().st_size < 1_000_000  # attachable to a bug report
    o = Opened(browser, out)
    page = o.page
    diff = page.locator("#diff")
    first = diff.locator("table").first.locator("tbody tr").first
    cells = [c.strip() for c in first.locator("td").all_text_contents()]
    change = (expected_figures[b_name]["peak_active_bytes"]
              - expected_figures[a_name]["peak_active_bytes"])  # fmt: skip
    assert cells[0] == "peak active" and cells[3] == "+20.79 MiB" and change == 21_794_816
    # stage by stage: both optimizer stages, and the step and its phases inferred from the
    # trace (no step annotations); the step's peak moved by the same 20.79 MiB
    stage_rows = diff.locator("table").nth(2).locator("tbody tr")
    names = [r.locator("td").first.text_content() for r in stage_rows.all()]
    # (PyTorch's optimizer ranges nested in them: Optimizer.step in the optimizer phase;
    # the empty zero_grad range is the step's sibling, just before it)
    assert names == ["Optimizer.zero_grad#AdamW.zero_grad", "step#1", "forward", "backward",
                     "optimizer", "Optimizer.step#AdamW.step"]  # fmt: skip
    assert "+20.79 MiB" in stage_rows.nth(1).text_content()
    assert "+20.79 MiB" in stage_rows.nth(4).text_content()
    assert "+20.79 MiB" in stage_rows.nth(5).text_content()
    # every other section describes A, and says so
    assert page.locator("#stages h2").text_content() == "Stages (A)"
    assert "active" in hover_timeline(page, 0.5, "#timeline-b")
    o.shot("real-diff.png")
    o.assert_clean()


def test_icicle_folds_frames_that_pass_everything_on(browser, tmp_path):
    out = write_report(write(wrapped_snapshot(6), tmp_path / "w.pickle"), tmp_path / "w.html")
    page = Opened(browser, out).page
    rows = [c.text_content() for c in page.locator("#peak .cell").all()]
    # main, w1, ..., w5 each pass all 4 MiB to one callee: one folded row stands for them, and
    # the icicle goes on from w6, where it branches into the two leaves (as the viewer does)
    assert page.locator("#peak .cell.folded").count() == 1
    assert page.locator("#peak .cell.folded").text_content() == (
        "\u22ef 6 frames that pass all 4.00 MiB on \u22ef"
    )
    assert [r.split(" (")[0] for r in rows if not r.startswith("\u22ef")] == [
        "all  4.00 MiB", "w6", "leaf_b", "leaf_a"
    ]  # fmt: skip
    page.locator("#peak .cell.folded").hover()
    tip = page.locator("#tooltip").text_content()
    assert tip.startswith("6 frames") and "main (main.py:1)" in tip and "w5 (w5.py:5)" in tip
    assert "w6" not in tip
    page.locator("#peak .cell.folded").click()
    assert page.locator("#peak .crumbs").text_content().endswith("w5 (w5.py:5)")
    # a chain of 3 frames is short enough to read: no fold
    out = write_report(write(wrapped_snapshot(2), tmp_path / "s.pickle"), tmp_path / "s.html")
    assert Opened(browser, out).page.locator("#peak .cell.folded").count() == 0

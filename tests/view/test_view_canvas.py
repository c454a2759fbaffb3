"""What the page paints, pixel by pixel, on hand-built snapshots in real Chromium: band
colours and positions, the hatched aggregate band, the reserved line, the stage strip, both
themes; and the compare page (two aligned timelines, the call-site table)."""

from __future__ import annotations

import numpy as np
import pytest
from browser_page import BROWSER_MARKS, Page
from view_fixtures import serving, small_snapshot, stacked_snapshot

import memlens
from memlens.analysis.sites import site_of_allocations
from memlens.views.web.data import ViewerData

pytestmark = BROWSER_MARKS

ML, MT, MAIN_H, MB = 72, 8, 440, 22  # the page's chart margins and height (CSS px)
PLOT_H = MAIN_H - MT - MB
PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#8cd17d", "#86bcb6", "#f1ce63", "#a0cbe8", "#ffbe7d",
           "#d37295", "#499894"]  # fmt: skip


def site_rgb(frame_id: int) -> tuple[int, int, int]:
    """The page's colour of a call site: a multiplicative hash of its frame id."""
    h = PALETTE[(((frame_id + 1) * 2654435761) & 0xFFFFFFFF) % len(PALETTE)]
    return int(h[1:3], 16), int(h[3:5], 16), int(h[5:7], 16)


@pytest.fixture
def stacked():
    snap = memlens.load(stacked_snapshot())
    with serving(ViewerData([snap], ["stacked"])) as url:
        yield snap, url


def geometry(pg: Page) -> tuple:
    """x of an event position and y of a byte count, from the known margins and range."""
    plot_w = pg.page.evaluate("() => window.memlens.panes[0].plotW")
    n = 43

    def x(event: float) -> float:
        return ML + event / n * plot_w

    def y(nbytes: float) -> float:
        return MT + PLOT_H - nbytes / 1000 * PLOT_H

    return x, y


# the aggregate band's two hatch colours per theme (and their anti-aliased blends)
HATCH = {"light": ((0x9A, 0xA3, 0xAD), (0xC3, 0xC9, 0xD1)),
         "dark": ((0x4A, 0x52, 0x5E), (0x5D, 0x66, 0x73))}  # fmt: skip


def is_hatch(px: tuple[int, ...], theme: str) -> bool:
    """Opaque and, channel by channel, between the theme's two hatch colours."""
    c0, c1 = HATCH[theme]
    return px[3] == 255 and all(min(a, b) - 2 <= v <= max(a, b) + 2 for v, a, b in zip(px, c0, c1))


def test_bands_aggregate_and_reserved_line_are_painted_where_they_belong(browser, stacked):
    snap, url = stacked
    dev = snap.device()
    a_site, c_site = site_of_allocations(dev, np.array([0, 41])).tolist()
    assert site_rgb(a_site) != site_rgb(c_site)
    pg = Page(browser, url)
    x, y = geometry(pg)
    px = lambda e, b: pg.pixel("canvas.main", x(e), y(b))  # noqa: E731
    # after the last event (42.3: clear of the dashed peak line at 42.5)
    assert px(42.3, 200)[:3] == site_rgb(a_site)  # A: 0-400
    assert px(42.3, 550)[:3] == site_rgb(c_site)  # C: 400-700 on top of A
    assert is_hatch(px(42.3, 740), "light")  # the 2-byte ones: 700-780, hatched
    assert px(42.3, 880)[3] == 0  # nothing above the active total
    assert px(42.3, 1000)[:3] == (0xD6, 0x27, 0x28)  # reserved line at 1000 bytes
    # after event 21 (A and 20 tiny ones): the aggregate sits right on A, C not there yet
    assert px(21.3, 200)[:3] == site_rgb(a_site)
    assert is_hatch(px(21.3, 420), "light")  # 400-440
    assert px(21.3, 550)[3] == 0
    # before the segment: nothing reserved, nothing active
    assert px(0.3, 200)[3] == 0
    # the stage strip: "fwd" covers events 1..30 on the first level
    strip = lambda e: pg.pixel("canvas.ann", x(e), 7)  # noqa: E731
    assert strip(20)[:3] == (0xC7, 0xD2, 0xFE) and strip(35)[3] == 0
    strip_box = pg.page.locator("canvas.ann").bounding_box()
    pg.page.mouse.move(strip_box["x"] + x(20), strip_box["y"] + 7)
    assert pg.page.inner_text("#tooltip").startswith("fwd\n")
    pg.page.mouse.move(strip_box["x"] + x(35), strip_box["y"] + 7)
    assert pg.page.is_hidden("#tooltip")
    # the legend card is shown while no panel is open
    assert pg.page.is_visible("#guide")
    pg.shot("canvas_stacked_light.png")
    assert not pg.errors


def test_dark_theme_repaints_with_its_own_colours(browser, stacked):
    snap, url = stacked
    pg = Page(browser, url, scheme="dark")
    x, y = geometry(pg)
    assert pg.page.evaluate("() => document.documentElement.classList.contains('dark')")
    assert is_hatch(pg.pixel("canvas.main", x(42.3), y(740)), "dark")
    assert pg.pixel("canvas.main", x(42.3), y(1000))[:3] == (0xFF, 0x6B, 0x6B)
    bg = pg.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert bg == "rgb(21, 23, 27)"
    # d switches back to light: the canvas is repainted in the light colours
    pg.page.keyboard.press("d")
    assert is_hatch(pg.pixel("canvas.main", x(42.3), y(740)), "light")
    pg.shot("canvas_stacked_dark_then_light.png")
    assert not pg.errors


def test_hover_and_click_name_the_band_under_the_pointer(browser, stacked):
    snap, url = stacked
    pg = Page(browser, url)
    x, y = geometry(pg)
    box = pg.page.locator("canvas.main").bounding_box()
    pg.page.mouse.move(box["x"] + x(42.3), box["y"] + y(550))
    pg.page.wait_for_selector("#tooltip:not([hidden])")
    tip = pg.page.inner_text("#tooltip")
    assert "300 B" in tip and "build_head (/home/u/model.py:99)" in tip
    pg.page.mouse.move(box["x"] + x(42.3), box["y"] + y(740))
    assert "40 small allocations: 80 B" in pg.page.inner_text("#tooltip")
    pg.page.mouse.click(box["x"] + x(42.3), box["y"] + y(550))
    pg.page.wait_for_selector("#details .frames li")
    assert not pg.page.is_visible("#guide")
    text = pg.page.inner_text("#details")
    assert "300 bytes" in text and "build_head" in text and "event 42" in text
    assert not pg.errors


def test_compare_aligns_two_timelines_and_tabulates_the_difference(browser):
    a, b = small_snapshot(), small_snapshot()
    b["device_traces"][0][3]["size"] = 500  # C grows by 200 bytes
    data = ViewerData([memlens.load(a), memlens.load(b)], ["run-a", "run-b"])
    with serving(data) as url:
        pg = Page(browser, url)
        page = pg.page
        page.wait_for_selector("#compare table.cmp td")
        assert [t.strip() for t in page.locator(".pane-tag").all_inner_texts()] == ["A", "B"]
        rows = page.locator("#compare table.cmp tr").all_inner_texts()
        assert any("train_step" in r and "410 B" in r and "610 B" in r and "+200 B" in r
                   for r in rows)  # fmt: skip
        assert "+200 B (B − A)" in page.inner_text("#compare")
        # both panes painted: the top of B's stack (610 of 1000 bytes) is higher than A's
        h = page.evaluate("() => window.memlens.panes.map((p) => p.plotH)")[0]
        plot_w = page.evaluate("() => window.memlens.panes[0].plotW")
        xc = ML + 3.3 / 7 * plot_w  # after event 3, C's allocation
        ya, yb = (MT + h - 500 / 1000 * h), (MT + h - 600 / 1000 * h)
        assert pg.pixel("canvas.main", xc, ya, 0)[3] == 0  # A: 410 bytes, empty at 500
        assert pg.pixel("canvas.main", xc, ya, 1)[3] == 255  # B: 610 bytes, painted at 500
        assert pg.pixel("canvas.main", xc, yb, 1)[3] == 255
        # zooming one pane zooms the other: the two stay aligned
        box = page.locator("canvas.main").first.bounding_box()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.keyboard.press("+")
        ranges = page.evaluate("() => window.memlens.panes.map((p) => [p.x0, p.x1])")
        assert ranges[0] == ranges[1] and ranges[0][1] - ranges[0][0] < 7
        pg.shot("compare_small.png")
        assert not pg.errors


def test_live_tree_expands_focuses_and_searches(browser):
    with serving(ViewerData([memlens.load(small_snapshot())], ["small"])) as url:
        pg = Page(browser, url)
        page = pg.page
        plot_w = page.evaluate("() => window.memlens.panes[0].plotW")
        box = page.locator("canvas.main").bounding_box()
        # above the stack after event 3 (410 of 1000 bytes): a moment, not an allocation
        page.mouse.click(box["x"] + ML + 3.3 / 7 * plot_w, box["y"] + MT + PLOT_H * 0.2)
        page.wait_for_selector("#live .tree .row")
        assert "after event 3" in page.inner_text("#live .crumbs")
        page.uncheck("#live-py")  # C++ frames too: train_step -> c10::malloc (C only)
        page.wait_for_selector("#live .row:has-text('c10::malloc')")
        rows = page.evaluate("""() => [...document.querySelectorAll('#live .tree .row')].map(
          (r) => ['.lbl', '.bytes', '.pct'].map((c) => r.querySelector(c).textContent))""")
        assert rows == [["all", "410 B", "100.0%"], ["train_step (train.py:10)", "410 B", "100.0%"],
                        ["c10::malloc (CUDACachingAllocator.cpp)", "300 B", "73.2%"]]  # fmt: skip
        heat = page.locator("#live .row:has-text('c10::malloc') .heat").get_attribute("style")
        assert "width: 73.17%" in heat
        # collapse and expand train_step
        ts = page.locator("#live .tree .row").nth(1)
        ts.locator(".lbl").click()
        assert not page.is_visible("#live .row:has-text('c10::malloc')")
        ts.locator(".lbl").click()
        assert page.is_visible("#live .row:has-text('c10::malloc')")
        # focus on train_step: it becomes the root, the breadcrumb leads back
        ts.locator("button.focus").click()
        crumbs = page.locator("#live .crumbs button").all_inner_texts()
        assert crumbs == ["all", "train_step (train.py:10)"]
        first_label = "() => document.querySelector('#live .tree .row .lbl').textContent"
        assert page.evaluate(first_label) == "train_step (train.py:10)"
        page.fill("#live-search", "MALLOC")
        assert page.locator("#live mark").all_inner_texts() == ["malloc"]
        page.locator("#live .crumbs button", has_text="all").click()
        assert page.evaluate(first_label) == "all"
        pg.shot("live_tree_focus.png")
        assert not pg.errors


def test_overview_brush_selects_and_dragging_pans(browser, stacked):
    snap, url = stacked
    pg = Page(browser, url)
    page = pg.page
    x, _ = geometry(pg)
    rng = "() => [window.memlens.panes[0].x0, window.memlens.panes[0].x1]"
    ov = page.locator("canvas.overview").bounding_box()
    before = pg.requests()
    page.mouse.move(ov["x"] + x(10), ov["y"] + 20)
    page.mouse.down()
    page.mouse.move(ov["x"] + x(15), ov["y"] + 20)
    page.mouse.move(ov["x"] + x(20), ov["y"] + 20)
    page.mouse.up()
    x0, x1 = page.evaluate(rng)  # within a pixel (0.05 events): the mouse lands on whole pixels
    assert x0 == pytest.approx(10, abs=0.06) and x1 == pytest.approx(20, abs=0.06)
    pg.settle(before)
    assert page.evaluate("() => window.memlens.panes[0].view.x") == {
        "mode": "event", "e0": pytest.approx(10, abs=0.06), "e1": pytest.approx(20, abs=0.06)}  # fmt: skip
    # drag the chart 1/4 of its width to the left: the range moves 2.5 events later
    main = page.locator("canvas.main").bounding_box()
    plot_w = page.evaluate("() => window.memlens.panes[0].plotW")
    page.mouse.move(main["x"] + ML + plot_w * 0.75, main["y"] + 100)
    page.mouse.down()
    page.mouse.move(main["x"] + ML + plot_w * 0.6, main["y"] + 100)
    page.mouse.move(main["x"] + ML + plot_w * 0.5, main["y"] + 100)
    page.mouse.up()
    p0, p1 = page.evaluate(rng)
    assert p0 == pytest.approx(x0 + 2.5, abs=0.03) and p1 == pytest.approx(x1 + 2.5, abs=0.03)
    assert not page.is_visible("#live")  # a drag is not a click in time
    assert not pg.errors

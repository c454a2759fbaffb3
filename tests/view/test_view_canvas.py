"""What the page paints, pixel by pixel, on hand-built snapshots in real Chromium: band
colours and positions, the hatched aggregate band, the reserved line, the stage strip, both
themes; and the compare page (two aligned timelines, the call-site table)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from browser_page import Page, box_of
from view_fixtures import ev, layered_snapshot, serving, small_snapshot, stacked_snapshot

import memlens
from chromium import BROWSER_MARKS
from memlens import Snapshot
from memlens.analysis.sites import site_of_allocations
from memlens.views.web.data import ViewerData
from snapshot_builders import wrapped_snapshot

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


@pytest.fixture
def layered():
    snap = memlens.load(layered_snapshot())
    with serving(ViewerData([snap], ["layered"])) as url:
        yield snap, url


def geometry(
    pg: Page, n: int, top: int
) -> tuple[Callable[[float], float], Callable[[float], float]]:
    """x of an event position and y of a byte count, from the known margins and range
    (n events, `top` bytes at the top of the plot)."""
    plot_w = pg.page.evaluate("() => window.memlens.panes[0].plotW")

    def x(event: float) -> float:
        return float(ML + event / n * plot_w)

    def y(nbytes: float) -> float:
        return MT + PLOT_H - nbytes / top * PLOT_H

    return x, y


# the aggregate band's two hatch colours per theme (and their anti-aliased blends)
HATCH = {"light": ((0x9A, 0xA3, 0xAD), (0xC3, 0xC9, 0xD1)),
         "dark": ((0x4A, 0x52, 0x5E), (0x5D, 0x66, 0x73))}  # fmt: skip


def is_hatch(px: tuple[int, ...], theme: str) -> bool:
    """Opaque and, channel by channel, between the theme's two hatch colours."""
    c0, c1 = HATCH[theme]
    return px[3] == 255 and all(min(a, b) - 2 <= v <= max(a, b) + 2 for v, a, b in zip(px, c0, c1))


# layered_snapshot: 353 events, 10,000 bytes reserved; after event 340 (the column at 340.5,
# clear of the dashed peak line at 332.5): A 0-4010, C 4010-7010, the 12-byte stripes
# 7010-7130, the aggregate band 7130-7442
LAYERED = dict(n=353, top=10_000)
AFTER = 340.5


# alpha of the main canvas' pixels in one column, rows y0..y1 (CSS px)
COLUMN_ALPHA = """([x, y0, y1]) => {
  const c = document.querySelector('canvas.main'), r = window.devicePixelRatio || 1;
  const top = Math.ceil(y0 * r), d = c.getContext('2d').getImageData(Math.floor(x * r), top, 1,
    Math.floor(y1 * r) - top).data;
  return Array.from(d.filter((_, i) => i % 4 === 3));
}"""


def site_colours(snap: Snapshot) -> tuple[tuple[int, int, int], ...]:
    """Colours of A (train_step), C (build_head) and the stripes (adam_state): distinct."""
    rows = np.array([0, 321, 322])
    a, c, s = (site_rgb(f) for f in site_of_allocations(snap.device(), rows).tolist())
    assert len({a, c, s}) == 3
    return a, c, s


def test_bands_aggregate_and_reserved_line_are_painted_where_they_belong(browser, layered):
    snap, url = layered
    a_rgb, c_rgb, stripe_rgb = site_colours(snap)
    pg = Page(browser, url)
    x, y = geometry(pg, **LAYERED)

    def px(e: float, b: float) -> tuple[int, ...]:
        return pg.pixel("canvas.main", x(e), y(b))

    assert px(AFTER, 2000)[:3] == a_rgb  # A: 0-4010
    assert px(AFTER, 5500)[:3] == c_rgb  # C: 4010-7010 on top of A
    assert px(AFTER, 7070)[:3] == stripe_rgb  # ten half-pixel stripes: 7010-7130
    assert is_hatch(px(AFTER, 7280), "light")  # the 1-byte ones: 7130-7442, hatched
    assert px(AFTER, 8500)[3] == 0  # nothing above the active total
    assert px(AFTER, 10_000)[:3] == (0xD6, 0x27, 0x28)  # reserved line at 10,000 bytes
    # after event 161 (A and 160 tiny ones): the aggregate sits right on A, C not there yet
    assert px(161.5, 2000)[:3] == a_rgb
    assert is_hatch(px(161.5, 4110), "light")  # 4010-4170
    assert px(161.5, 5500)[3] == 0
    # the stage strip: "fwd" covers events 1..100 on the first level

    def strip(e: float) -> tuple[int, ...]:
        return pg.pixel("canvas.ann", x(e), 7)

    assert strip(50)[:3] == (0xC7, 0xD2, 0xFE) and strip(150)[3] == 0
    strip_box = box_of(pg.page.locator("canvas.ann"))
    pg.page.mouse.move(strip_box["x"] + x(50), strip_box["y"] + 7)
    assert pg.page.inner_text("#tooltip").startswith("fwd\n")
    pg.page.mouse.move(strip_box["x"] + x(150), strip_box["y"] + 7)
    assert pg.page.is_hidden("#tooltip")
    # the legend card is shown while no panel is open
    assert pg.page.is_visible("#guide")
    pg.shot("canvas_layered_light.png")
    assert not pg.errors


def test_dark_theme_repaints_with_its_own_colours(browser, layered):
    snap, url = layered
    pg = Page(browser, url, scheme="dark")
    x, y = geometry(pg, **LAYERED)
    assert pg.page.evaluate("() => document.documentElement.classList.contains('dark')")
    assert is_hatch(pg.pixel("canvas.main", x(AFTER), y(7280)), "dark")
    assert pg.pixel("canvas.main", x(AFTER), y(10_000))[:3] == (0xFF, 0x6B, 0x6B)
    bg = pg.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert bg == "rgb(21, 23, 27)"
    # d switches back to light: the canvas is repainted in the light colours
    pg.page.keyboard.press("d")
    assert is_hatch(pg.pixel("canvas.main", x(AFTER), y(7280)), "light")
    pg.shot("canvas_layered_dark_then_light.png")
    assert not pg.errors


def test_hover_and_click_name_the_band_under_the_pointer(browser, layered):
    snap, url = layered
    pg = Page(browser, url)
    x, y = geometry(pg, **LAYERED)
    box = box_of(pg.page.locator("canvas.main"))
    pg.page.mouse.move(box["x"] + x(AFTER), box["y"] + y(5500))
    pg.page.wait_for_selector("#tooltip:not([hidden])")
    tip = pg.page.inner_text("#tooltip")
    assert "2.93 KiB" in tip and "build_head (/home/u/model.py:99)" in tip
    pg.page.mouse.move(box["x"] + x(AFTER), box["y"] + y(7280))
    tip = pg.page.inner_text("#tooltip")
    assert "hatched: 312 allocations summed, 312 B (4.2% of this column)" in tip
    assert "each under 2 B, a 16th of a pixel here (312 B): Shift + wheel" in tip
    pg.page.mouse.click(box["x"] + x(AFTER), box["y"] + y(5500))
    pg.page.wait_for_selector("#details .frames li")
    assert not pg.page.is_visible("#guide")
    text = pg.page.inner_text("#details")
    assert "3,000 bytes" in text and "build_head" in text and "event 322" in text
    assert not pg.errors


def test_sub_pixel_allocations_are_coloured_stripes_that_can_be_hovered(browser, layered):
    snap, url = layered
    _, c_rgb, stripe_rgb = site_colours(snap)
    # at one pixel the stripes (12 bytes of 24.4 a pixel) would be in the aggregate band
    full = ViewerData([snap]).view(0, 0, width=1200, height=PLOT_H, min_px=1)
    assert full["bands"]["row"] == [0, 321] and full["small"]["max_size"] == 24
    assert full["small"]["bytes"][-1] == 120 + 300  # the stripes and the 1-byte ones
    pg = Page(browser, url)
    x, y = geometry(pg, **LAYERED)
    rows = pg.page.evaluate("() => window.memlens.panes[0].view.bands.row")
    assert rows == [0, 321, *range(322, 332)]  # the page asked for sub-pixel detail
    # the ten half-pixel stripes paint their 4.9 pixel rows in their call site's colour
    for b in (7045, 7070, 7095):  # the pixel rows inside 7010-7130 (the edges are blends)
        assert pg.pixel("canvas.main", x(AFTER), y(b))[:3] == stripe_rgb
    assert pg.pixel("canvas.main", x(AFTER), y(6960))[:3] == c_rgb  # C right under them
    # hovering a stripe names one of them (the one covering most of the pixel row)
    box = box_of(pg.page.locator("canvas.main"))
    pg.page.mouse.move(box["x"] + x(AFTER), box["y"] + y(7070))
    pg.page.wait_for_selector("#tooltip:not([hidden])")
    tip = pg.page.inner_text("#tooltip")
    assert tip.startswith("12 B\n") and "adam_state (/home/u/optim.py:5)" in tip
    hover = pg.page.evaluate("() => window.memlens.panes[0].hover.row")
    assert 322 <= hover < 332
    # the hovered stripe is the one with the most of the pixel row under the pointer
    v = ViewerData([snap]).view(0, 0, width=1200, height=PLOT_H)
    y_top = int(pg.page.evaluate("() => window.memlens.mouse.y"))  # the pointer's pixel row
    px_lo, px_hi = (10_000 * (MT + PLOT_H - yy) / PLOT_H for yy in (y_top + 1, y_top))
    off = {r: 7010 + 12 * (r - 322) for r in range(322, 332)}
    cover = {r: min(o + 12, px_hi) - max(o, px_lo) for r, o in off.items()}
    assert hover == max(cover, key=cover.__getitem__) and v["bands"]["size"][2] == 12
    pg.page.mouse.click(box["x"] + x(AFTER), box["y"] + y(7070))
    pg.page.wait_for_selector("#details .frames li")
    text = pg.page.inner_text("#details")
    assert "12 bytes" in text and "adam_state" in text and f"event {hover + 1}" in text
    # no pixel below the drawn bands' top is partly transparent: where two colours share a
    # pixel row (A's top, 0.4 pixel into C's first row) the canvas would leave it washed out
    column = pg.page.evaluate(COLUMN_ALPHA, [x(AFTER), y(7130) + 1, MT + PLOT_H])
    assert len(column) > 290 and set(column) == {255}
    pg.shot("canvas_layered_stripes.png")
    assert not pg.errors


def test_hint_says_what_the_aggregate_band_holds(browser):
    # 4000 allocations of 1 byte on a 10,000-byte segment: 24.4 bytes a pixel, each under
    # 1/16 of a pixel, so the whole stack is the aggregate band
    trace = [ev("segment_alloc", 0x1000, 10_000, 0)]
    trace += [ev("alloc", 0x1000 + k, 1, 1 + k) for k in range(4000)]
    snap = memlens.load({"segments": [], "device_traces": [trace]})
    with serving(ViewerData([snap], ["dust"])) as url:
        pg = Page(browser, url)
        assert pg.page.inner_text(".hint") == (
            "Hatched band at the tallest column: 100% of it, 3.91 KiB in 4,000 allocations "
            "(24 B a pixel here). Each under 2 B, a 16th of a pixel here (3.91 KiB): Shift + "
            "wheel zooms the memory axis to separate them."
        )
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
        box = box_of(page.locator("canvas.main").first)
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
        box = box_of(page.locator("canvas.main"))
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
        assert heat is not None and "width: 73.17%" in heat
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
    # the overview and the figures arrive after the chart and can move the overview canvas:
    # measure it only once they are in (under load the drag otherwise missed the canvas)
    page.wait_for_function("() => window.memlens.panes[0].ov && window.memlens.panes[0].summary")
    x, _ = geometry(pg, n=43, top=1000)
    rng = "() => [window.memlens.panes[0].x0, window.memlens.panes[0].x1]"
    ov = box_of(page.locator("canvas.overview"))
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
    main = box_of(page.locator("canvas.main"))
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


def _click_moment(page, fraction: float) -> None:
    """Click the chart at `fraction` of its width, high above the stack (a moment)."""
    plot_w = page.evaluate("() => window.memlens.panes[0].plotW")
    box = box_of(page.locator("canvas.main"))
    page.mouse.click(box["x"] + ML + fraction * plot_w, box["y"] + MT + PLOT_H * 0.1)


def test_live_tree_folds_frames_that_pass_everything_on(browser):
    """main, w1..w5 each hand all 4 MiB to one callee: one row stands for them and the tree
    goes on from w6, where it branches (a chain of 3 would stay as rows)."""
    with serving(ViewerData([memlens.load(wrapped_snapshot(6))], ["wrapped"])) as url:
        pg = Page(browser, url)
        page = pg.page
        _click_moment(page, 2.5 / 3)  # after event 2: both allocations live
        page.wait_for_selector("#live .tree .row")
        rows = page.evaluate("""() => [...document.querySelectorAll('#live .tree .row')]
          .filter((r) => r.offsetParent !== null).map((r) => r.querySelector('.lbl').textContent)""")
        assert rows == ["all", "\u22ef 6 frames that pass it all on \u22ef", "w6 (w6.py:6)",
                        "leaf_b (leaf_b.py:20)", "leaf_a (leaf_a.py:10)"]  # fmt: skip
        chain = page.locator("#live .row.chain")
        title = chain.locator(".lbl").get_attribute("title")
        assert title is not None and title.split("\n") == [
            "main (main.py:1)", "w1 (w1.py:1)", "w2 (w2.py:2)", "w3 (w3.py:3)", "w4 (w4.py:4)",
            "w5 (w5.py:5)",
        ]  # fmt: skip
        chain.click()  # lists the frames
        assert page.locator("#live .chain-frame").all_inner_texts()[-1] == "w5 (w5.py:5)"
        # focus on w6 keeps the whole path in the breadcrumbs
        page.locator("#live .row", has_text="w6 (w6.py:6)").locator("button.focus").click()
        crumbs = page.locator("#live .crumbs button").all_inner_texts()
        assert crumbs[:2] == ["all", "main (main.py:1)"] and crumbs[-1] == "w6 (w6.py:6)"
        assert len(crumbs) == 8
        assert not pg.errors
    with serving(ViewerData([memlens.load(wrapped_snapshot(2))], ["short"])) as url:
        page = Page(browser, url).page
        _click_moment(page, 2.5 / 3)
        page.wait_for_selector("#live .tree .row")
        assert page.locator("#live .row.chain").count() == 0

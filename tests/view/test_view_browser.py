"""The viewer in real headless Chromium (Debian's): it draws on the canvas, zooms, shows an
allocation's stack on click and the live tree on a click in time; hostile strings stay
text. Screenshots go to artifacts/view/."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from browser_page import BAND_POINT, PIXELS, Page, box_of
from view_fixtures import EVIL, serving, small_snapshot

import memlens
from chromium import BROWSER_MARKS
from memlens.simulation.synthetic import generate_snapshot
from memlens.views.web.data import ViewerData

pytestmark = BROWSER_MARKS


def exercise(browser, path: Path, tag: str) -> None:
    snap = memlens.load(path, warn=False)
    dev = snap.device()
    with serving(ViewerData([snap], [path.name])) as url:
        pg = Page(browser, url)
        page = pg.page
        px = page.evaluate(PIXELS)
        assert px["painted"] > 0.3 and px["colours"] > 5, px  # a stacked chart, not a blank canvas
        pg.shot(f"{tag}_loaded.png")

        # zoom in around the middle: the range shrinks and the picture changes
        box = box_of(page.locator("canvas.main"))
        x0, x1 = page.evaluate("() => [window.memlens.panes[0].x0, window.memlens.panes[0].x1]")
        assert (x0, x1) == (0, dev.n_events)
        before = pg.requests()
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        for _ in range(4):
            page.mouse.wheel(0, -400)
            time.sleep(0.05)
        pg.settle(before)
        time.sleep(0.3)
        pg.settle(pg.requests() - 1)
        z0, z1 = page.evaluate("() => [window.memlens.panes[0].x0, window.memlens.panes[0].x1]")
        assert z1 - z0 < (x1 - x0) / 5
        after = page.evaluate(PIXELS)
        assert after["sum"] != px["sum"] and after["painted"] > 0.2
        pg.shot(f"{tag}_zoomed.png")

        # click the biggest band: its details and stack appear
        pt = page.evaluate(BAND_POINT)
        assert pt is not None
        page.mouse.move(box["x"] + pt["x"], box["y"] + pt["y"])
        page.wait_for_selector("#tooltip:not([hidden])")
        page.mouse.click(box["x"] + pt["x"], box["y"] + pt["y"])
        page.wait_for_selector("#details .frames li", timeout=10_000)
        row = page.evaluate("() => window.memlens.pinned.row")  # the band under the pointer
        frames = snap.stack_frames(int(dev.alloc_stack[row]))
        text = page.inner_text("#details")
        assert f"{int(dev.alloc_size[row]):,} bytes" in text
        assert frames[0]["name"] in text
        pg.shot(f"{tag}_details.png")

        # click high above the stack: what is live at that moment, as a tree
        page.mouse.click(box["x"] + box["width"] * 0.4, box["y"] + 11)
        page.wait_for_selector("#live .tree .row", timeout=10_000)
        rows = page.locator("#live .tree .row").count()
        assert rows > 2
        page.fill("#live-search", frames[-1]["name"][:6])
        assert page.locator("#live mark").count() >= 1
        pg.shot(f"{tag}_live.png")

        # keyboard: wall-time axis keeps the visible range, then back
        page.keyboard.press("Escape")
        before = pg.requests()
        page.keyboard.press("t")
        pg.settle(before)
        x = page.evaluate("() => window.memlens.panes[0].view.x")
        assert x["mode"] == "time" and x["t1"] - x["t0"] < (dev.time_us[-1] - dev.time_us[0]) / 4
        assert page.evaluate(PIXELS)["painted"] > 0.2
        pg.shot(f"{tag}_time_axis.png")
        before = pg.requests()
        page.keyboard.press("t")
        pg.settle(before)
        assert page.evaluate("() => window.memlens.panes[0].view.x.mode") == "event"

        # help overlay, theme, jump to peak (Escape leaves the search box first)
        page.keyboard.press("Escape")
        page.keyboard.press("?")
        assert page.is_visible("#help")
        page.keyboard.press("Escape")
        page.keyboard.press("d")
        assert page.evaluate("() => document.documentElement.classList.contains('dark')")
        before = pg.requests()
        page.keyboard.press("p")
        pg.settle(before)
        pg.shot(f"{tag}_dark_peak.png")
        assert not pg.errors and not pg.foreign and not pg.dialogs


def test_viewer_on_a_generated_snapshot(browser, tmp_path):
    path = tmp_path / "gen.pickle"
    generate_snapshot(path, events=100_000)
    exercise(browser, path, "gen100k")


@pytest.mark.slow
def test_viewer_on_a_million_events(browser, tmp_path):
    path = tmp_path / "gen1m.pickle"
    generate_snapshot(path, events=1_000_000)
    exercise(browser, path, "gen1m")


def test_hostile_strings_are_shown_as_text(browser):
    snap = memlens.load(small_snapshot(evil=True))
    with serving(ViewerData([snap], [EVIL])) as url:
        pg = Page(browser, url)
        page = pg.page
        assert EVIL in page.inner_text("#title")
        box = box_of(page.locator("canvas.main"))
        pt = page.evaluate(BAND_POINT)  # C, the 300-byte allocation with the hostile frame
        page.mouse.move(box["x"] + pt["x"], box["y"] + pt["y"])
        page.wait_for_selector("#tooltip:not([hidden])")
        assert EVIL in page.inner_text("#tooltip")  # its first user frame, as text
        page.mouse.click(box["x"] + pt["x"], box["y"] + pt["y"])
        page.wait_for_selector("#details .frames li")
        page.click("#details summary")
        text = page.inner_text("#details")
        assert EVIL in text  # shown literally
        page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + 11)
        page.wait_for_selector("#live .tree .row")
        assert page.evaluate("() => document.querySelectorAll('img').length") == 0
        pg.shot("hostile.png")
        assert not pg.dialogs and not pg.errors and not pg.foreign


def test_real_snapshot_y_zoom_separates_small_allocations(browser, shared_snapshots_dir):
    # every tensor here is under a pixel at full height (157 MiB of a 51 GiB peak)
    snap = memlens.load(shared_snapshots_dir / "cs336_memory_ctx128_fullstep.pickle", warn=False)
    with serving(ViewerData([snap], ["cs336 ctx128 fullstep"])) as url:
        pg = Page(browser, url)
        page = pg.page
        n_bands = "() => window.memlens.panes[0].view.bands.row.length"
        before_bands = page.evaluate(n_bands)
        box = box_of(page.locator("canvas.main"))
        page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] * 0.5)
        page.keyboard.down("Shift")
        for _ in range(5):
            before = pg.requests()
            page.mouse.wheel(0, -600)
            pg.settle(before)
        page.keyboard.up("Shift")
        v = page.evaluate(
            "() => { const v = window.memlens.panes[0].view; return [v.ymin, v.ymax]; }"
        )
        assert v[0] > 0 and v[1] - v[0] < snap.device().peak_reserved_bytes / 5
        assert page.evaluate(n_bands) > before_bands + 20
        # the overview strip is drawn too (the stage strip's arrival resizes the canvases)
        ov = page.evaluate("""() => { const c = document.querySelector('canvas.overview');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 0; return n / (d.length / 4); }""")
        assert ov > 0.2
        pg.shot("real_yzoom.png")
        page.keyboard.press("0")
        assert not pg.errors

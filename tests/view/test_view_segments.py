"""The Active Cached Segment Timeline: a band per segment alive at each column's peak of
reserved memory, exactly the segments `memlens fragmentation --event N` reconstructs there;
the page switches to it and a click opens the allocator state."""

from __future__ import annotations

import os

import pytest
from browser_page import Page, box_of
from view_fixtures import serving

import memlens
from chromium import CHROMIUM
from memlens.analysis.allocator_state import state_at
from memlens.simulation.synthetic import generate_trace_dict
from memlens.views.web.data import ViewerData


@pytest.fixture(scope="module")
def snap():
    return memlens.load(generate_trace_dict(events=3000, seed=3))


def test_segments_are_the_allocator_state_at_each_column(snap):
    dev = snap.device(0)
    v = ViewerData([snap]).segments(0, 0, width=120, height=400)
    assert v["kind"] == "segments" and len(v["bands"]["row"]) > 3
    b = v["bands"]
    for c in range(120):
        st = state_at(dev, v["sample"][c])
        alive = [k for k in range(len(b["row"])) if b["c0"][k] <= c < b["c1"][k]]
        assert sorted(b["address"][k] for k in alive) == sorted(
            s["address"] for s in st["segments"]
        )
        assert v["active"][c] == st["reserved_bytes"] == sum(b["size"][k] for k in alive)
        assert v["small"]["bytes"][c] == 0
        # the sample is the column's peak of reserved memory
        lo, hi = v["bounds"][c], v["bounds"][c + 1]
        if hi > lo:
            assert v["active"][c] == max(dev.reserved_at(e) for e in range(lo, hi))


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_segment_chart_in_the_page(browser, snap):
    with serving(ViewerData([snap], ["g"])) as url:
        pg = Page(browser, url)
        page = pg.page
        page.keyboard.press("g")
        page.wait_for_function(
            "() => window.memlens.panes[0].view && window.memlens.panes[0].view.kind === 'segments'"
        )
        pt = page.evaluate("""() => { const p = window.memlens.panes[0], v = p.view, b = v.bands;
          const k = b.size.indexOf(Math.max(...b.size)), c = Math.floor((b.c0[k] + b.c1[k]) / 2);
          let off = 0;
          for (let i = b.run_start[k]; i < b.run_start[k + 1] && b.run_col[i] <= c; i++) off = b.run_off[i];
          return {x: p.colXFn(v)(c + 0.5), y: 8 + p.plotH - ((off + b.size[k] / 2) / v.ymax) * p.plotH, a: b.address[k]}; }""")
        box = box_of(page.locator("canvas.main"))
        page.mouse.move(box["x"] + pt["x"], box["y"] + pt["y"])
        page.wait_for_selector("#tooltip:not([hidden])")
        assert f"at {pt['a']}" in page.inner_text("#tooltip")
        pg.shot("segments.png")
        page.mouse.click(box["x"] + pt["x"], box["y"] + pt["y"])
        page.wait_for_selector("#state canvas.segments")
        assert pt["a"] in page.evaluate(
            "() => window.memlens.allocator.data.segments.map((s) => s.address)"
        )
        assert not pg.errors

"""Every allocation reachable (issue 17): thousands of same-size small allocations are one
hatched band at full view, whose share and count the page states, and each its own band,
with its own hover, once the time window is narrow enough that they fit. The layout half
runs without a browser."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from browser_page import Page, box_of, client_point
from view_fixtures import USER, ev, serving

import memlens
from chromium import BROWSER_MARKS
from memlens.views.layout import DeviceLayout
from memlens.views.web.data import ViewerData

N_SMALL = 3000
SMALL = 64 << 10  # 64 KiB each: 1/160 of a pixel at full view
BIG = 4 << 30
CHUNK = 100


def many_small() -> dict[str, Any]:
    """N_SMALL allocations of SMALL bytes (in segments of CHUNK of them), all alive when a
    BIG one comes and goes in its own segment (the peak, where they are 4.4% of the
    memory), then freed in allocation order."""
    base = 1 << 40
    trace: list[dict[str, Any]] = []
    addrs = [base + k * SMALL for k in range(N_SMALL)]
    for k, a in enumerate(addrs):
        if k % CHUNK == 0:
            trace.append(ev("segment_alloc", a, CHUNK * SMALL, len(trace)))
        trace.append(ev("alloc", a, SMALL, len(trace)))
    big = base + (1 << 32)
    trace += [ev("segment_alloc", big, BIG, len(trace)), ev("alloc", big, BIG, len(trace) + 1)]
    trace += [
        ev("free_completed", big, BIG, len(trace)),
        ev("segment_free", big, BIG, len(trace) + 1),
    ]
    trace += [ev("free_completed", a, SMALL, len(trace) + k) for k, a in enumerate(addrs)]
    for e in trace:
        e["frames"] = [USER]
    return {"segments": [], "device_traces": [trace]}


def test_layout_one_event_window_draws_every_sub_pixel_allocation():
    # 3000 allocations an eighth of a pixel each under a 4 GiB one: at 1000 columns the old
    # cell budget (300k (band, column) cells) drew 300 of them on a one-event window
    dev = memlens.load(many_small()).device(0)
    lay = DeviceLayout(dev)
    peak = dev.peak_event_index
    v = lay.view(lay.event_bounds(peak, peak + 1, 1000), height=8000, min_px=1 / 16)
    assert len(v.band_rows) == N_SMALL + 1
    assert v.small_count.tolist() == [0] * 1000 and v.cut_count.tolist() == [0] * 1000
    assert len(v.run_col) == N_SMALL + 1  # one run each, whatever the width
    # the whole trace at 1000 columns and a tight run budget: the budget's choice is counted
    v = lay.view(lay.event_bounds(0, dev.n_events, 1000), height=8000, min_px=1 / 16, max_runs=500)
    c = int(np.argmax(v.active))
    assert v.active[c] == BIG + N_SMALL * SMALL
    drawn = int((v.band_c0 <= c).sum() - (v.band_c1 <= c).sum())
    assert v.small_count[c] + drawn == N_SMALL + 1
    assert v.cut_count[c] == v.small_count[c] and v.cut_bytes[c] == v.small_bytes[c] > 0


@BROWSER_MARKS[0]
@BROWSER_MARKS[1]
def test_hatched_band_is_stated_then_separates(browser):
    snap = memlens.load(many_small())
    dev = snap.device(0)
    with serving(ViewerData([snap], ["many small"])) as url:
        pg = Page(browser, url)
        page = pg.page
        # full view: the hatched band's share and count at the tallest column are stated
        hint = page.inner_text(".hint")
        share = N_SMALL * SMALL / (BIG + N_SMALL * SMALL)
        assert f"{share * 100:.1f}% of it" in hint and f"{N_SMALL:,} allocations" in hint, hint
        assert "Shift + wheel" in hint and "zoom in on time" not in hint  # no false advice
        box = box_of(page.locator("canvas.main"))
        pt = page.evaluate("""() => { const p = window.memlens.panes[0], v = p.view;
          let c = 0; for (let i = 1; i < v.width; i++) if (v.active[i] > v.active[c]) c = i;
          const y = 8 + p.plotH - ((v.small.offset[c] + v.small.bytes[c] / 2 - v.ymin) / (v.ymax - v.ymin)) * p.plotH;
          return {x: p.colXFn(v)(c + 0.5), y: Math.floor(y)}; }""")
        page.mouse.move(box["x"] + pt["x"], box["y"] + pt["y"])
        page.wait_for_selector("#tooltip:not([hidden])")
        tip = page.inner_text("#tooltip")
        assert f"hatched: {N_SMALL:,} allocations summed" in tip, tip
        pg.shot("hatched_full.png")

        # a narrow window at the start (the first 150 allocations, in two segments): one
        # band each, two pixels tall, and hovering each band's middle names that band
        before = pg.requests()
        page.evaluate("() => window.memlens.panes[0].setRange(1, 153)")
        pg.settle(before)
        time.sleep(0.2)
        pg.settle(pg.requests() - 1)
        v = page.evaluate("""() => { const p = window.memlens.panes[0], v = p.view, b = v.bands;
          const c = v.width - 1, out = [];
          for (let k = 0; k < b.row.length; k++) {
            if (c < b.c0[k] || c >= b.c1[k]) continue;
            let off = 0;
            for (let i = b.run_start[k]; i < b.run_start[k + 1] && b.run_col[i] <= c; i++) off = b.run_off[i];
            const y = 8 + p.plotH - ((off + b.size[k] / 2 - v.ymin) / (v.ymax - v.ymin)) * p.plotH;
            out.push([b.row[k], y]);
          }
          return {bands: out, x0: p.colXFn(v)(c), x1: p.colXFn(v)(c + 1), small: v.small.count[c], event: v.sample[c]}; }""")
        alive = dev.live_at(v["event"])
        assert v["small"] == 0 and len(v["bands"]) == len(alive) > 140
        assert sorted(r for r, _ in v["bands"]) == alive.tolist()
        # mouse events land on whole CSS pixels: the canvas is shifted by a fraction of a
        # pixel, as another machine's fonts would place it, and every band is still found
        for shift in (0.0, 0.02, 0.5, 0.98):
            page.evaluate(
                f"() => {{ document.body.style.transform = 'translate({shift}px, {shift}px)'; }}"
            )
            box = box_of(page.locator("canvas.main"))
            for row, y in v["bands"]:
                page.mouse.move(*client_point(box, v["x0"], v["x1"], y))
                got = page.evaluate(
                    "() => { const h = window.memlens.panes[0].hover; return h && h.row; }"
                )
                assert got == row, (shift, row, y, got)
        assert page.inner_text(".hint") == ""
        pg.shot("hatched_narrow.png")
        assert not pg.errors


def test_real_training_peak_one_event_window(shared_snapshots_dir):
    # issue 17: at wedson's training peak the old cell budget left 40% of the memory in the
    # hatched band even on a one-event window; now only allocations under 1/16 px stay there
    snap = memlens.load(shared_snapshots_dir / "wedson_medium_128_training.pickle", warn=False)
    data = ViewerData([snap])
    dev = snap.device()
    pk = dev.peak_event_index
    v = data.view(0, dev.device, width=1300, height=412, e0=pk, e1=pk + 1)
    live = dev.live_at(pk)
    small = v["small"]
    drawn = set(v["bands"]["row"])
    assert small["cut_count"] == [0] * 1300  # nothing left out by the budget
    # every allocation of at least the threshold is its own band; the rest are summed
    big = {int(r) for r in live if dev.alloc_size[r] >= small["min_size"]}
    assert big <= drawn and len(big) > 600
    assert small["count"][0] == len(live) - len(drawn)
    assert small["bytes"][0] / v["active"][0] < 0.001


@BROWSER_MARKS[0]
@BROWSER_MARKS[1]
def test_jump_to_peak_reaches_every_allocation_at_the_peak(browser, shared_snapshots_dir):
    # issue 25: at jump-to-peak zoom (a tenth of the trace) the cs336 full step's peak
    # column summed 452 allocations (4.1 GiB) the run budget left out; the page now zooms
    # in on the peak until none is left out, so each one of at least 1/16 px is a band
    path = shared_snapshots_dir / "cs336_memory_ctx128_fullstep.pickle"
    snap = memlens.load(path, warn=False)
    dev = snap.device()
    with serving(ViewerData([snap], ["full step"])) as url:
        pg = Page(browser, url)
        page = pg.page
        page.keyboard.press("p")
        page.wait_for_function("""() => { const p = window.memlens.panes[0];
          const [f0, f1] = p.fullRange();
          return !p.peakFocus && !p.inflight && p.view && p.view.vx1 - p.view.vx0 < (f1 - f0) / 10; }""",
                               timeout=60_000)  # fmt: skip
        got = page.evaluate("""() => { const p = window.memlens.panes[0], v = p.view;
          const s = p.dm.peak, u = p.axis === "time" ? s.peak_time_us : s.peak_event_index + 0.5;
          const c = Math.floor(((u - v.vx0) / (v.vx1 - v.vx0)) * v.width);
          return {cut: v.small.cut_count[c], count: v.small.count[c], bytes: v.small.bytes[c],
                  min: v.small.min_size, c, w: v.width, span: v.vx1 - v.vx0}; }""")  # fmt: skip
        assert got["cut"] == 0, got  # nothing left out by the budget at the peak
        live = dev.live_at(dev.peak_event_index)
        under = [r for r in live.tolist() if dev.alloc_size[r] < got["min"]]
        # what stays summed is only what is under the size threshold (a y zoom separates it)
        assert got["count"] <= len(under) and got["bytes"] < 0.001 * dev.peak_active_bytes
        assert not pg.errors

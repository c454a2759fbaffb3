"""Streams drawn apart in the main chart (issue 37): with split=stream, a trace on several
CUDA streams is a lane per stream, each stacked on its own with its own aggregate band
(views/layout/lanes.py, views/web/stream_lanes.py); a trace on one stream is drawn as
before. Worked by hand on two_stream_snapshot, checked for sums on a generated trace, and
in Chromium (each stream's allocations under the pointer in its own lane)."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest
from browser_page import Page
from starlette.testclient import TestClient
from view_fixtures import serving, small_snapshot

import memlens
from chromium import CHROMIUM
from memlens.simulation.synthetic import generate_snapshot
from memlens.views.layout import MAX_DETAIL_RUNS, DeviceLayout
from memlens.views.web.data import ViewerData
from memlens.views.web.server import create_app
from shared_data import SHARED_SNAPSHOTS
from snapshot_builders import MiB, block, ev, segment

SIDE = 0x7F00  # the side stream's handle


def two_stream_snapshot() -> dict[str, Any]:
    """A and B on the default stream, X and Y on SIDE, each stream in its own segment.

    live after each event, default stream:  0 0 1000 1000 1500 1500  500  500  500  500
                            SIDE:            0 0    0 3000 3000 3000 3000 5000 5000 2000
    active (the sum): the peak is 5500 after event 7.
    """
    S0, S1 = 0x100000, 0x400000
    A, B, X, Y = S0, S0 + 1024, S1, S1 + 3072
    trace = [
        ev("segment_alloc", S0, 2 * MiB, 0),  # 0
        ev("segment_alloc", S1, 2 * MiB, 1, SIDE),  # 1
        ev("alloc", A, 1000, 2),  # 2  A
        ev("alloc", X, 3000, 3, SIDE),  # 3  X
        ev("alloc", B, 500, 4),  # 4  B
        ev("free_requested", A, 1000, 5),  # 5
        ev("free_completed", A, 1000, 6),  # 6  A gone
        ev("alloc", Y, 2000, 7, SIDE),  # 7  Y: the peak, 5500
        ev("free_requested", X, 3000, 8, SIDE),  # 8
        ev("free_completed", X, 3000, 9, SIDE),  # 9  X gone
    ]
    segments = [
        segment(S0, [block(B, 512, 500, "active_allocated"),
                     block(S0 + 512, 2 * MiB - 512, 2 * MiB - 512, "inactive")]),
        segment(S1, [block(Y, 2048, 2000, "active_allocated"),
                     block(S1 + 2048, 2 * MiB - 2048, 2 * MiB - 2048, "inactive")], stream=SIDE),
    ]  # fmt: skip
    return {"segments": segments, "device_traces": [trace]}


def test_each_stream_is_stacked_in_its_own_lane():
    dev = memlens.load(two_stream_snapshot(), cache=False).device(0)
    assert dev.active_after.tolist() == [0, 0, 1000, 4000, 4500, 4500, 3500, 5500, 5500, 2500]
    lay = DeviceLayout(dev)
    # one column per event, 100 px: lanes 1500 (default) and 5000 (SIDE) bytes tall, a
    # 16 px gap above each and one at the top: 6500 bytes over 100 - 48 px, so a gap is
    # ceil(16 x 6500 / 52) = 2000 bytes; SIDE's lane starts at 1500 + 2000 = 3500, the top
    # at 6500 + 3 x 2000
    v = lay.view(lay.event_bounds(0, 10, 10), 100, min_px=1 / 16, lanes=lay.stream_lanes)
    assert v.ymax == 12500
    lanes = v.lanes
    assert lanes is not None
    assert lanes.keys.tolist() == [0, 1]  # Snapshot.streams [0, 0x7f00]
    assert lanes.base.tolist() == [0, 3500]
    assert lanes.top.tolist() == [1500, 5000]
    # bands lane by lane, allocation order within: A, B (default), X, Y (SIDE); rows are
    # allocation order A=0, X=1, B=2, Y=3
    assert v.band_rows.tolist() == [0, 2, 1, 3]
    assert v.band_c0.tolist() == [2, 4, 3, 7]
    assert v.band_c1.tolist() == [6, 10, 9, 10]
    # B sits on A until A's free completes (event 6), then on the lane's floor; Y on X
    # until X's completes (event 9), then on SIDE's floor (3500)
    assert v.offset_runs() == {
        "run_start": [0, 1, 3, 4, 6],
        "run_col": [2, 4, 6, 3, 7, 9],
        "run_off": [0, 1000, 0, 3500, 6500, 3500],
    }
    # every allocation is a band: the aggregate bands are empty, on top of each lane
    assert lanes.small_bytes.tolist() == [[0] * 10, [0] * 10]
    assert lanes.small_offset.tolist() == [
        [0, 0, 1000, 1000, 1500, 1500, 500, 500, 500, 500],
        [3500, 3500, 3500, 6500, 6500, 6500, 6500, 8500, 8500, 5500],
    ]
    # the chart's small_* are the sums over the lanes: the drawn bytes are all of active
    assert v.small_offset.tolist() == dev.active_after.tolist()


def test_without_lanes_nothing_changes():
    dev = memlens.load(two_stream_snapshot(), cache=False).device(0)
    lay = DeviceLayout(dev)
    v = lay.view(lay.event_bounds(0, 10, 10), 100, min_px=1 / 16)
    assert v.lanes is None
    assert v.ymax == 4 * MiB  # one stack, fit to reserved memory (the two segments)
    assert v.small_offset.tolist() == [0, 0, 0, 3000, 3000, 3000, 3000, 3000, 3000, 0]


def test_lanes_add_up_to_active_memory_on_a_generated_trace(tmp_path):
    path = tmp_path / "gen.pickle"
    generate_snapshot(path, events=20_000)
    dev = memlens.load(path, cache=False).device(0)
    assert np.count_nonzero(np.bincount(dev.alloc_stream)) == 2  # its side stream
    lay = DeviceLayout(dev)
    for e0, e1, width in [(0, dev.n_events, 700), (1000, 1400, 300), (5000, 5003, 50)]:
        v = lay.view(lay.event_bounds(e0, e1, width), 300, min_px=1 / 16, lanes=lay.stream_lanes)
        lanes = v.lanes
        assert lanes is not None
        height = lanes.small_offset - lanes.base[:, None] + lanes.small_bytes
        assert height.sum(axis=0).tolist() == v.active.tolist()
        assert (height <= lanes.top[:, None]).all() and (height.max(axis=1) == lanes.top).all()
        assert (lanes.small_bytes >= 0).all() and (lanes.small_count >= 0).all()
        # lanes one above the other, never overlapping
        assert (lanes.base[1:] >= lanes.base[:-1] + lanes.top[:-1]).all()
        assert len(v.run_col) + len(v.band_rows) <= MAX_DETAIL_RUNS


def client() -> TestClient:
    data = ViewerData([memlens.load(two_stream_snapshot(), cache=False)], ["two"])
    return TestClient(create_app(data), base_url="http://127.0.0.1")


def test_the_api_splits_on_request():
    c = client()
    (dev,) = c.get("/api/meta").json()["snapshots"][0]["devices"]
    assert dev["stream_lanes"] == 2
    v = c.get("/api/d/0/view?e0=0&e1=10&width=10&height=100&split=stream").json()
    assert [(lane["stream"], lane["base"], lane["top"]) for lane in v["lanes"]] == [
        ("0x0", 0, 1500),
        ("0x7f00", 3500, 5000),
    ]
    assert v["lanes"][1]["small"]["offset"][7] == 8500
    assert v["ymin"] == 0 and v["ymax"] == 12500
    assert v["bands"]["row"] == [0, 2, 1, 3]
    # a y zoom does not apply to lanes; without split there are none
    z = c.get("/api/d/0/view?e0=0&e1=10&width=10&height=100&split=stream&ymin=10&ymax=20")
    assert z.json() == v
    assert "lanes" not in c.get("/api/d/0/view?e0=0&e1=10&width=10&height=100").json()
    bad = c.get("/api/d/0/view?e0=0&e1=10&width=10&height=100&split=pool")
    assert bad.status_code == 400 and bad.json() == {"error": "split must be 'stream' (or absent)"}


def test_a_trace_on_one_stream_is_drawn_as_before():
    app = create_app(ViewerData([memlens.load(small_snapshot(), cache=False)], ["one"]))
    c = TestClient(app, base_url="http://127.0.0.1")
    (dev,) = c.get("/api/meta").json()["snapshots"][0]["devices"]
    assert dev["stream_lanes"] == 0
    q = "/api/d/0/view?e0=0&e1=40&width=50&height=80"
    plain, split = c.get(q), c.get(q + "&split=stream")
    assert split.status_code == 200
    assert json.loads(split.content) == json.loads(plain.content)


def test_a_real_recording_on_one_stream_is_drawn_as_before():
    path = SHARED_SNAPSHOTS / "wedson_medium_128_training.pickle"
    if not path.is_file():
        pytest.skip("shared snapshots not present")
    data = ViewerData([memlens.load(path, cache=False)], ["real"])
    c = TestClient(create_app(data), base_url="http://127.0.0.1")
    (dev,) = c.get("/api/meta").json()["snapshots"][0]["devices"]
    assert dev["stream_lanes"] == 0
    for q in ["e0=0&e1=20000", "e0=9000&e1=9050"]:
        url = f"/api/d/0/view?{q}&width=1300&height=420"
        assert c.get(url + "&split=stream").content == c.get(url).content


# the page's view: each band's middle (CSS px on the canvas) and each lane's floor and top
LANES_ON_PAGE = """() => {
  const p = window.memlens.panes[0], v = p.view, b = v.bands, colX = p.colXFn(v);
  const y = (bytes) => 8 + p.plotH - (bytes / v.ymax) * p.plotH;
  const bands = [];
  for (let k = 0; k < b.row.length; k++) {
    const c = b.run_col[b.run_start[k]];  // the band's first run
    const c1 = b.run_start[k] + 1 < b.run_start[k + 1] ? b.run_col[b.run_start[k] + 1] : b.c1[k];
    bands.push({row: b.row[k], x: (colX(c) + colX(c1)) / 2, y: y(b.run_off[b.run_start[k]] + b.size[k] / 2)});
  }
  return {bands, lanes: v.lanes.map((l) => ({stream: l.stream, floor: y(l.base), top: y(l.base + l.top)}))};
}"""


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_in_the_page_each_streams_allocations_are_in_its_lane(browser):
    with serving(ViewerData([memlens.load(two_stream_snapshot())], ["two streams"])) as url:
        pg = Page(browser, url)
        page = pg.page
        assert page.locator("#streams-ctl").is_visible()
        on_page = page.evaluate(LANES_ON_PAGE)
        lanes = {lane["stream"]: lane for lane in on_page["lanes"]}
        assert list(lanes) == ["0x0", "0x7f00"]
        stream_of_row = {0: "0x0", 1: "0x7f00", 2: "0x0", 3: "0x7f00"}  # A X B Y
        box = page.locator("canvas.main").bounding_box()
        assert box is not None
        hovered = {}
        for band in on_page["bands"]:
            lane = lanes[stream_of_row[band["row"]]]
            assert lane["top"] < band["y"] < lane["floor"]  # y grows downwards
            page.mouse.move(box["x"] + band["x"], box["y"] + band["y"])
            hovered[band["row"]] = page.evaluate("() => window.memlens.panes[0].hover?.row")
        assert hovered == {0: 0, 1: 1, 2: 2, 3: 3}
        pg.shot("stream_lanes.png")
        # s merges the streams: one stack, fitted to reserved memory
        page.mouse.move(5, 5)
        page.keyboard.press("s")
        page.wait_for_function("() => !window.memlens.panes[0].view.lanes")
        assert page.evaluate("() => window.memlens.panes[0].view.ymax") == 4 * MiB
        pg.shot("stream_lanes_merged.png")
        assert not pg.errors

"""The viewer's Memory Pools card (issue 37): per pool, its live bytes over the trace as an
envelope and its share at the peak (views/web/pools_view.py), drawn for a trace with a
private pool (a CUDA graph's), hidden for the default pool alone."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from browser_page import Page
from starlette.testclient import TestClient
from view_fixtures import serving, small_snapshot

import memlens
from chromium import CHROMIUM
from memlens.views.web.data import ViewerData
from memlens.views.web.pools_view import pool_envelopes
from memlens.views.web.segment_sizes import column_max
from memlens.views.web.server import create_app
from snapshot_builders import MiB, block, ev, pool_snapshot, segment


def test_envelopes_of_a_private_and_the_default_pool():
    dev = memlens.load(pool_snapshot()).device(0)
    # A (1000 bytes, the graph's pool) lives over events 2-3: the peak; then B and C
    # (100 + 200) in the default pool
    assert pool_envelopes(dev, 400) == {
        "n_events": 9,
        "peak_event": 2,
        "pools": [
            {"pool": [1, 0], "peak_bytes": 1000, "peak_count": 1, "share": 1.0,
             "max_bytes": 1000, "envelope": [0, 0, 1000, 1000, 0, 0, 0, 0, 0]},
            {"pool": [0, 0], "peak_bytes": 0, "peak_count": 0, "share": 0.0,
             "max_bytes": 300, "envelope": [0, 0, 0, 0, 0, 0, 100, 100, 300]},
        ],
        "streams": [],  # one stream
        "segment_sizes": [],  # 2 MiB segments only
    }  # fmt: skip
    # three columns: the most of events 0-2, 3-5, 6-8
    assert [p["envelope"] for p in pool_envelopes(dev, 3)["pools"]] == [
        [1000, 1000, 0],
        [0, 0, 300],
    ]


def test_without_pool_ids_everything_is_one_unknown_pool_and_the_sum_is_active():
    dev = memlens.load(pool_snapshot(pool_ids=False)).device(0)
    pools = pool_envelopes(dev, 400)["pools"]
    assert [p["pool"] for p in pools] == [None]
    assert pools[0]["envelope"] == dev.active_after.tolist()


def test_the_pools_add_up_to_active_memory():
    dev = memlens.load(pool_snapshot()).device(0)
    curves = np.array([p["envelope"] for p in pool_envelopes(dev, dev.n_events)["pools"]])
    assert curves.sum(axis=0).tolist() == dev.active_after.tolist()


def two_stream_snapshot() -> dict[str, Any]:
    """pool_snapshot with C (200 bytes, event 8) allocated on stream 0x7f00."""
    snap = pool_snapshot()
    snap["device_traces"][0][8]["stream"] = 0x7F00
    return snap


def test_streams_drawn_apart():
    dev = memlens.load(two_stream_snapshot()).device(0)
    assert pool_envelopes(dev, 400)["streams"] == [
        {"stream": "0x0", "peak_bytes": 1000, "peak_count": 1, "share": 1.0,
         "max_bytes": 1000, "envelope": [0, 0, 1000, 1000, 0, 0, 100, 100, 100]},
        {"stream": "0x7f00", "peak_bytes": 0, "peak_count": 0, "share": 0.0,
         "max_bytes": 200, "envelope": [0, 0, 0, 0, 0, 0, 0, 0, 200]},
    ]  # fmt: skip


def test_column_max():
    assert column_max(np.array([3, 1, 4, 1, 5, 9, 2]), 3) == [3, 4, 9]
    assert column_max(np.array([3, 1]), 10) == [3, 1]  # never more columns than events
    assert column_max(np.array([], dtype=np.int64), 10) == []


def test_the_endpoint_answers_and_refuses_a_bad_width():
    app = create_app(ViewerData([memlens.load(pool_snapshot())], ["p"]))
    client = TestClient(app, base_url="http://127.0.0.1")
    got = client.get("/api/d/0/pools?width=3").json()
    assert [p["pool"] for p in got["pools"]] == [[1, 0], [0, 0]]
    bad = client.get("/api/d/0/pools?width=abc")
    assert bad.status_code == 400 and "width" in bad.json()["error"]


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_the_pools_card_shows_a_private_pool_and_hides_for_the_default_alone(browser):
    with serving(ViewerData([memlens.load(pool_snapshot())], ["graph"])) as url:
        pg = Page(browser, url)
        page = pg.page
        page.wait_for_selector("#pools table.pools")
        rows = page.evaluate("""() => [...document.querySelectorAll('#pools tr')].slice(1)
          .map((tr) => [...tr.cells].map((c) => c.textContent))""")
        assert rows == [
            ["private (1, 0)", "1000 B", "100.0%", "1000 B"],
            ["default", "0 B", "0.0%", "300 B"],
        ]
        # the envelopes are drawn: the canvas holds painted pixels
        painted = page.evaluate("""() => { const c = document.querySelector('canvas.pools');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let n = 0; for (let i = 3; i < d.length; i += 4) n += d[i] > 0; return n; }""")
        assert painted > 100
        pg.shot("pools.png")
        assert not pg.errors
    with serving(ViewerData([memlens.load(two_stream_snapshot())], ["streams"])) as url:
        pg = Page(browser, url)
        pg.page.wait_for_selector("#pools table.pools")
        heads = pg.page.evaluate("""() => [...document.querySelectorAll('#pools table')]
          .map((t) => [...t.rows].map((tr) => tr.cells[0].textContent))""")
        assert heads == [["pool", "private (1, 0)", "default"], ["stream", "0x0", "0x7f00"]]
        assert pg.page.locator("canvas.pools").count() == 2
        pg.shot("pools_streams.png")
        assert not pg.errors
    with serving(ViewerData([memlens.load(sized_segments_snapshot())], ["sizes"])) as url:
        pg = Page(browser, url)
        pg.page.wait_for_selector("#pools table.pools")
        rows = pg.page.evaluate("""() => [...document.querySelectorAll('#pools table')]
          .map((t) => [...t.rows].map((tr) => [...tr.cells].map((c) => c.textContent)))""")
        assert rows == [  # the default pool alone: no pools table
            [["reserved in segments of", "most"], ["2 MiB", "2.00 MiB"], ["20 MiB", "20.00 MiB"],
             ["other sizes", "6.00 MiB"], ["before the trace", "6.00 MiB"]]
        ]  # fmt: skip
        pg.shot("segment_sizes.png")
        assert not pg.errors
    with serving(ViewerData([memlens.load(small_snapshot())], ["plain"])) as url:
        pg = Page(browser, url)
        assert pg.page.evaluate("() => document.querySelector('#pools').hidden")
        assert not pg.errors


def sized_segments_snapshot() -> dict[str, Any]:
    """Segments of each size class: A (2 MiB) made at event 0 and freed at 3, B (20 MiB)
    made at 1, X (6 MiB, made before the trace) freed at 2, C (6 MiB, one large request)
    made at 4; B and C are the final segments, so 6 MiB were reserved before the trace."""
    A, B, X, C = 0x1000000, 0x4000000, 0x8000000, 0xC000000
    trace = [
        ev("segment_alloc", A, 2 * MiB, 0, frames=[]),
        ev("segment_alloc", B, 20 * MiB, 1, frames=[]),
        ev("segment_free", X, 6 * MiB, 2, frames=[]),
        ev("segment_free", A, 2 * MiB, 3, frames=[]),
        ev("segment_alloc", C, 6 * MiB, 4, frames=[]),
    ]
    segments = [segment(B, [block(B, 20 * MiB, 0, "inactive")]),
                segment(C, [block(C, 6 * MiB, 0, "inactive")])]  # fmt: skip
    return {"segments": segments, "device_traces": [trace]}


def test_reserved_memory_by_segment_size_adds_up_to_reserved():
    dev = memlens.load(sized_segments_snapshot()).device(0)
    got = pool_envelopes(dev, 400)["segment_sizes"]
    assert got == [
        {"size_class": "2 MiB", "max_bytes": 2 * MiB, "envelope": [2 * MiB] * 3 + [0, 0]},
        {"size_class": "20 MiB", "max_bytes": 20 * MiB, "envelope": [0] + [20 * MiB] * 4},
        {"size_class": "other sizes", "max_bytes": 6 * MiB, "envelope": [0] * 4 + [6 * MiB]},
        {"size_class": "before the trace", "max_bytes": 6 * MiB,
         "envelope": [6 * MiB] * 2 + [0] * 3},
    ]  # fmt: skip
    assert np.sum([g["envelope"] for g in got], axis=0).tolist() == dev.reserved_after.tolist()
    # one class alone has nothing to split: pool_snapshot's segments are all 2 MiB
    assert pool_envelopes(memlens.load(pool_snapshot()).device(0), 400)["segment_sizes"] == []

"""The viewer's find box: a frame text or a 0x address flags the bands of a viewport that
match (any frame of the stack / the address inside the allocation), and the page paints
them and says how many."""

from __future__ import annotations

import os

import pytest
from browser_page import Page
from view_fixtures import serving, small_snapshot

import memlens
from chromium import CHROMIUM
from memlens.views.web.data import ViewerData, Window


def test_frame_and_address_find():
    # A, B, D: [train_step]; C: [c10::malloc (CUDACachingAllocator.cpp), train_step]
    data = ViewerData([memlens.load(small_snapshot())])
    q = Window(e0=0, e1=7, width=7, height=100)
    v = data.view(0, 0, **q, q="CachingAllocator")  # a C++ file name, not the site
    assert v["bands"]["row"] == [0, 1, 2, 3] and v["bands"]["match"] == [0, 0, 1, 0]
    assert data.view(0, 0, **q, q="TRAIN_step")["bands"]["match"] == [1, 1, 1, 1]
    assert data.view(0, 0, **q, q="nowhere")["bands"]["match"] == [0, 0, 0, 0]
    assert "match" not in data.view(0, 0, **q)["bands"]
    # 0x3000 + 299 is the last byte of C (300 bytes); 0x3000 + 300 is past it
    v = data.view(0, 0, **q, q="0x312b")
    assert v["bands"]["match"] == [0, 0, 1, 0]
    assert v["address_hits"] == {
        "total": 1,
        "hits": [{"row": 2, "address": "0x3000", "size": 300, "alloc_event": 3, "free_event": 7}],
    }
    assert data.view(0, 0, **q, q="0x312c")["address_hits"]["total"] == 0


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_find_box_highlights_on_the_timeline(browser):
    with serving(ViewerData([memlens.load(small_snapshot())], ["small"])) as url:
        pg = Page(browser, url)
        page = pg.page
        page.fill("#find", "CachingAllocator")
        page.wait_for_function("() => window.memlens.panes[0].view.bands.match !== undefined")
        text = page.inner_text(".find")
        assert 'find "CachingAllocator": 1 of the 4 drawn allocations match' in text, text
        pg.shot("find_frame.png")
        page.fill("#find", "0x3000")
        page.wait_for_function("() => !!window.memlens.panes[0].view.address_hits")
        assert "1 allocations held it over the trace: 300 B at 0x3000, events 3–end (row 2)" in (
            page.inner_text(".find")
        )
        assert not pg.errors


def test_new_endpoints_refuse_bad_parameters():
    from starlette.testclient import TestClient

    from memlens.views.web.server import create_app

    app = create_app(ViewerData([memlens.load(small_snapshot())], ["small"]))
    c = TestClient(app, base_url="http://127.0.0.1")
    for url, needle in [
        ("/api/d/0/view?q=" + "x" * 201, "q must be at most 200 characters"),
        ("/api/d/0/segments?e0=5&e1=5", "e1 must be greater than e0"),
        ("/api/d/0/segments?width=1e400", "width must be a finite number"),
        ("/api/d/0/state?event=abc", "event must be a number"),
        ("/api/d/9/state?event=1", "device"),
    ]:
        r = c.get(url)
        assert r.status_code == 400 and needle in r.json()["error"], (url, r.text)
    assert c.get("/api/d/0/state?event=99").json()["event"] == 6  # clamped to the last
    assert c.get("/api/d/0/segments?width=7").json()["kind"] == "segments"

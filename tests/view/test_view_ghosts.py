"""Ghost allocations in the viewer (issue 37): memory allocated before the trace began, or
whose alloc entry a full ring buffer dropped, is drawn hatched in the ghost colours, apart
from the traced bands (known from the final segments, or from its free in the trace)."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import pytest
from browser_page import Page
from view_fixtures import serving

import memlens
from chromium import CHROMIUM
from memlens.views.web.data import ViewerData
from snapshot_builders import block, ev, segment

S = 0x100000


def ring_buffer_snapshot() -> dict[str, Any]:
    """A ring buffer of 2 entries, full: G (2048 bytes at S) is active in the final segment
    with no entry (a ghost, alive throughout); P (1024 at S+3072) is freed at event 0, its
    alloc entry lost (so it is never on screen: it ends at the first event); C (1024 at
    S+2048) is allocated at event 1."""
    trace = [ev("free_completed", S + 3072, 1024, 0), ev("alloc", S + 2048, 1024, 1)]
    blocks = [
        block(S, 2048, 2048, "active_allocated"),
        block(S + 2048, 1024, 1024, "active_allocated"),
        block(S + 3072, 1024, 1024, "inactive"),
    ]
    return {
        "segments": [segment(S, blocks)],
        "device_traces": [trace],
        "allocator_settings": {"trace_alloc_max_entries": 2},
    }


# the most common colour of a 9x9 square of the main canvas at (x, y): a tile's ground
SQUARE = """([x, y]) => {
  const c = document.querySelector('canvas.main'), r = window.devicePixelRatio || 1;
  const d = c.getContext('2d').getImageData(Math.floor(x * r) - 4, Math.floor(y * r) - 4, 9, 9).data;
  const out = []; for (let i = 0; i < d.length; i += 4) out.push(`${d[i]},${d[i + 1]},${d[i + 2]}`);
  return out;
}"""
# canvas point of (event column fraction, bytes)
POINT = """([f, bytes]) => { const p = window.memlens.panes[0], v = p.view;
  return [p.colXFn(v)(v.width * f), 8 + p.plotH - ((bytes - v.ymin) / (v.ymax - v.ymin)) * p.plotH]; }"""


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_ghosts_are_hatched_apart_from_traced_bands(browser):
    snap = memlens.load(ring_buffer_snapshot())
    flags = snap.device(0).alloc_flags.tolist()
    # P preexisting (1), C traced and live at the end (4), G a ghost (1 | 2 | 4)
    assert sorted(flags) == [1, 4, 7]
    with serving(ViewerData([snap], ["ring"])) as url:
        pg = Page(browser, url)
        page = pg.page
        ghost = "223,227,236"  # --ghost, light theme
        pg.shot("ghosts.png")
        for f, nbytes in ((0.25, 1000), (0.75, 1000)):  # G, before and after C's alloc
            top = Counter(page.evaluate(SQUARE, page.evaluate(POINT, [f, nbytes])))
            assert top.most_common(1)[0][0] == ghost, (f, nbytes, top)
            assert "91,107,140" not in top  # never the plain no-stack colour
        # C, traced, keeps its call site's colour
        c_top = Counter(page.evaluate(SQUARE, page.evaluate(POINT, [0.75, 2500])))
        assert ghost not in c_top
        assert not pg.errors

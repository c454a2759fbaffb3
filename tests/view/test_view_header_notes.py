"""The pane's header notes: a truncated trace is a warning (red), allocations made before
recording began are information (the muted colour), issue 37."""

from __future__ import annotations

import os

import pytest
from browser_page import Page
from view_fixtures import ev, serving, small_snapshot

import memlens
from chromium import CHROMIUM
from memlens.views.web.data import ViewerData


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_predating_allocations_are_information_a_truncated_trace_a_warning(browser):
    snap = small_snapshot()
    # two allocations made before the trace, freed in it; a ring buffer of 9 entries, full
    snap["device_traces"][0][1:1] = [ev("free_completed", 0x8000 + 64 * k, 64, 1) for k in (0, 1)]
    snap["allocator_settings"] = {"trace_alloc_max_entries": 9}
    with serving(ViewerData([memlens.load(snap)], ["s"])) as url:
        pg = Page(browser, url)
        notes = pg.page.evaluate("""() => [...document.querySelectorAll('.notes > span')]
          .map((e) => [e.textContent, getComputedStyle(e).color])""")
        red, muted = pg.page.evaluate("""() => ['--peak', '--muted'].map((v) => {
          const e = document.createElement('span'); e.style.color = `var(${v})`;
          document.body.append(e); const c = getComputedStyle(e).color; e.remove(); return c; })""")
        assert notes == [
            ["the trace is truncated (ring buffer full)", red],
            ["2 allocations predate the trace", muted],
        ]
        assert not pg.errors

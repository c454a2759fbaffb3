"""The viewer's Allocator State card is `memlens fragmentation --event N --json`: the API
returns its figures and segments (by address, with offsets), and the page, opened at the
timeline cursor and stepped with its buttons, shows them and draws a row per segment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

import pytest
from browser_page import Page, box_of
from view_fixtures import serving

import memlens
from chromium import CHROMIUM
from memlens.simulation.synthetic import generate_snapshot
from memlens.views.web.allocator_view import allocator_state
from memlens.views.web.data import ViewerData


@pytest.fixture(scope="module")
def snap_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("alloc") / "g.pickle"
    generate_snapshot(path, events=3000)
    return path


def fragmentation_json(path, event: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "memlens", "fragmentation", str(path), "--event", str(event), "--json"],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    answer: dict[str, Any] = json.loads(out.stdout)
    return answer


def as_cli(st: Mapping[str, Any]) -> dict[str, Any]:
    """The API's answer in the CLI's shape (what the card adds taken out)."""
    out = {
        k: v
        for k, v in st.items()
        if k not in ("rounding_waste_bytes", "segments_shown", "blocks_shown", "settings")
    }
    out["segments"] = [
        {**{k: v for k, v in s.items() if k != "blocks_total"},
         "blocks": [{k: v for k, v in b.items() if k != "offset"} for b in s["blocks"]]}
        for s in st["segments"]
    ]  # fmt: skip
    return out


def test_api_is_fragmentation_json(snap_path):
    dev = memlens.load(snap_path, warn=False).device()
    for event in (1500, dev.peak_event_index):
        ref = fragmentation_json(snap_path, event)
        st = allocator_state(dev, event)
        ref["segments"].sort(key=lambda s: int(s["address"], 16))
        assert as_cli(st) == ref
        for s in st["segments"]:
            base = int(s["address"], 16)
            assert all(b["offset"] == int(b["address"], 16) - base for b in s["blocks"])
        waste = sum(
            max(512, -(-b["size"] // 512) * 512) - b["size"]
            for s in ref["segments"]
            for b in s["blocks"]
        )
        assert st["rounding_waste_bytes"] == waste
        settings = dev.snapshot.allocator_settings
        assert [k for k, _ in st["settings"]] == sorted(settings)


@pytest.mark.browser
@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium")
def test_card_follows_the_cursor_and_steps(browser, snap_path):
    snap = memlens.load(snap_path, warn=False)
    with serving(ViewerData([snap], ["g"])) as url:
        pg = Page(browser, url)
        page = pg.page
        page.keyboard.press("p")  # the peak: the cursor and the live tree
        page.wait_for_selector("#live .tree .row")
        page.click("#live-state")
        page.wait_for_selector("#state canvas.segments")
        peak = snap.device().peak_event_index
        ref = fragmentation_json(snap_path, peak)
        text = page.inner_text("#state")
        assert f"after event {peak:,}" in text
        assert (
            f"in {ref['n_segments']:,} segments" in text
            and f"in {ref['n_blocks']:,} blocks" in text
        )
        assert f"{ref['fragmentation'] * 100:.1f}%" in text
        h = page.evaluate("() => document.querySelector('#state canvas.segments').clientHeight")
        assert h == ref["n_segments"] * 13
        pg.shot("allocator_state.png")
        # step forward: the card, the cursor and the live tree move to the next event
        page.click("#state-next")
        page.wait_for_function(
            f"() => window.memlens.allocator.data && window.memlens.allocator.data.event === {peak + 1}"
        )
        page.wait_for_function(f"() => window.memlens.live.event === {peak + 1}")
        nxt = fragmentation_json(snap_path, peak + 1)
        page.wait_for_function(
            f"() => document.querySelector('#state').innerText.includes('in {nxt['n_blocks']:,} blocks')"
        )
        # a click in the chart moves the cursor: the card follows
        box = box_of(page.locator("canvas.main"))
        page.mouse.click(box["x"] + box["width"] * 0.3, box["y"] + 12)
        page.wait_for_function(
            "() => { const a = window.memlens.allocator, l = window.memlens.live;"
            " return a.event === l.event && a.data && a.data.event === l.event; }"
        )
        # a block opens its allocation: the middle of the first block of the first segment
        # that has one (the canvas is drawn once the data is in)
        page.wait_for_selector("#state canvas.segments")
        pt = page.evaluate("""() => { const d = window.memlens.allocator.data;
          const i = d.segments.findIndex((s) => s.blocks.length), s = d.segments[i], b = s.blocks[0];
          const w = document.querySelector('#state canvas.segments').getBoundingClientRect().width;
          const max = d.segments.reduce((m, x) => Math.max(m, x.size), 1), bar = Math.max(2, s.size / max * w);
          return {x: (b.offset + b.size / 2) / s.size * bar, y: i * 13 + 5, row: b.row}; }""")
        cv = box_of(page.locator("#state canvas.segments"))
        page.mouse.click(cv["x"] + pt["x"], cv["y"] + pt["y"])
        page.wait_for_selector("#details .kv")
        assert page.evaluate("() => window.memlens.pinned.row") == pt["row"]
        assert not pg.errors

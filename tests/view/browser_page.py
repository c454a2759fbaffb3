"""Real headless Chromium (Debian's) for the viewer tests: the browser fixture's launcher,
(tests/chromium.py launches it) a page wrapper that records errors, dialogs and foreign requests, and canvas readers."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # playwright is only needed when a browser test runs
    from playwright.sync_api import Browser, Dialog, FloatRect, Locator

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "view"

# Canvas-relative point at the middle of the largest band on screen, or None.
BAND_POINT = """() => {
  const p = window.memlens.panes[0], v = p.view, b = v.bands;
  let best = -1;
  for (let k = 0; k < b.row.length; k++) if (best < 0 || b.size[k] * (b.c1[k] - b.c0[k]) > b.size[best] * (b.c1[best] - b.c0[best])) best = k;
  if (best < 0) return null;
  const c = Math.floor((b.c0[best] + b.c1[best]) / 2);
  let off = 0;
  for (let i = b.run_start[best]; i < b.run_start[best + 1] && b.run_col[i] <= c; i++) off = b.run_off[i];
  const y = 8 + p.plotH - ((off + b.size[best] / 2 - v.ymin) / (v.ymax - v.ymin)) * p.plotH;
  return {x: p.colXFn(v)(c + 0.5), y, row: b.row[best]};
}"""

# Fraction of plot pixels painted, and how many distinct colours.
PIXELS = """() => {
  const c = document.querySelector('canvas.main'), r = window.devicePixelRatio || 1;
  const d = c.getContext('2d').getImageData(80 * r, 10 * r, c.width - 100 * r, c.height - 40 * r).data;
  let painted = 0; const colours = new Set();
  for (let i = 0; i < d.length; i += 16) { if (d[i + 3] > 0) { painted++; colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]); } }
  return {painted: painted / (d.length / 16), colours: colours.size, sum: d.reduce((a, x, i) => (a + x * (i % 7 + 1)) % 1000000007, 0)};
}"""


def box_of(locator: Locator) -> FloatRect:
    """Where an element is on the page (it must be laid out: None from playwright is a failure)."""
    box = locator.bounding_box()
    assert box is not None, f"{locator} is not laid out"
    return box


def client_point(box: FloatRect, x_lo: float, x_hi: float, y: float) -> tuple[int, int]:
    """Whole client coordinates for a canvas-relative target: Chromium truncates a mouse
    event's clientX/Y to whole CSS pixels, so a fractional target lands up to a pixel off,
    depending on where layout put the canvas (fonts differ between machines). The point
    returned lies in [x_lo, x_hi) and in the pixel row holding y, wherever the canvas is."""
    cx = math.ceil(box["x"] + x_lo)
    cy = math.ceil(box["y"] + math.floor(y))
    assert cx - box["x"] < x_hi, ("no whole pixel in the target", x_lo, x_hi)
    return cx, cy


class Page:
    def __init__(
        self, browser: Browser, url: str, scheme: Literal["light", "dark"] = "light"
    ) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 900}, color_scheme=scheme)
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.foreign: list[str] = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.extend([m.text] if m.type == "error" else []))
        self.page.on("dialog", self._dismiss)
        self.page.on(
            "request", lambda r: self.foreign.extend([] if r.url.startswith(url) else [r.url])
        )
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        # the summary's line and the stage strip arrive after the first paint and move the
        # chart: measure nothing before they are in
        self.page.wait_for_selector("body[data-settled='1']", timeout=30_000)

    def _dismiss(self, dialog: Dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def requests(self) -> int:
        return int(self.page.evaluate("() => window.memlens.panes[0].reqCount"))

    def settle(self, before: int, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.requests() > before and not self.page.evaluate(
                "() => window.memlens.panes[0].inflight"
            ):
                return
            time.sleep(0.05)
        raise AssertionError("no new viewport arrived")

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / name))

    def pixel(self, selector: str, x: float, y: float, index: int = 0) -> tuple[int, ...]:
        """RGBA of one canvas pixel at CSS coordinates (x, y)."""
        return tuple(self.page.evaluate(PIXEL, [selector, index, x, y]))


PIXEL = """([sel, i, x, y]) => {
  const c = document.querySelectorAll(sel)[i], r = window.devicePixelRatio || 1;
  return Array.from(c.getContext('2d').getImageData(Math.floor(x * r), Math.floor(y * r), 1, 1).data);
}"""

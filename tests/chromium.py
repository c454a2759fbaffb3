"""Real headless Chromium for the browser tests: Debian's, driven by Playwright, never a
downloaded browser. The `browser` fixture (tests/conftest.py) launches it once per test
module; modules mark themselves with BROWSER_MARKS so they skip where it is absent."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]  # fmt: skip

# every browser test module: pytestmark = BROWSER_MARKS
BROWSER_MARKS = [
    pytest.mark.browser,
    pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium"),
]


def launch_browser() -> Iterator[Any]:
    """Yield a launched Debian Chromium (playwright's Browser)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()

"""The browser is shared by every browser test of a worker (starting Chromium takes a second)."""

from __future__ import annotations

import pytest
from browser_page import launch_browser


@pytest.fixture(scope="session")
def browser():
    yield from launch_browser()

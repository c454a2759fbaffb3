"""Every test here must leave no memlens recording running (a leaked one would make the next
test's window hold earlier steps)."""

from __future__ import annotations

import pytest

from memlens.capture import session


@pytest.fixture(autouse=True)
def _no_recording_left_on():
    yield
    assert session._stack == [], "a recording was left on"

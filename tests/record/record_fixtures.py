"""Fixtures for the capture tests: a fresh fake backend per test, and clean module state.

Not a conftest.py: other test modules do `from shared_data import ...`, and a second module
named conftest would shadow the top-level one. Each test module turns these into fixtures:

    _clean = pytest.fixture(autouse=True)(record_fixtures.clean_capture_state)
    fake = pytest.fixture(record_fixtures.fake_backend)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from record_fake_backend import FakeBackend

from memlens import recording
from memlens.capture import backend, markers, oom, session


def clean_capture_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(backend.BACKEND_ENV, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    yield
    backend._reset_for_tests()
    session._reset_for_tests()
    markers._reset_for_tests()
    oom._reset_for_tests()
    recording._report_warned = False


def fake_backend() -> FakeBackend:
    f = FakeBackend()
    backend.set_backend(f)
    return f

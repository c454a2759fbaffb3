"""Shared fixtures. Real snapshots are read from ../shared/snapshots beside the repository
(never copied into it); tests that need them skip cleanly when that folder is absent."""

from __future__ import annotations

import json
import pickle
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared_data import SHARED_SNAPSHOTS
from snapshot_builders import hand_snapshot

# dask_processes: a real Dask scheduler and two workers on loopback (fleet, plan)
pytest_plugins = ["dask_cluster", "reader_choice"]


@pytest.fixture(scope="session")
def shared_snapshots_dir() -> Path:
    if not SHARED_SNAPSHOTS.is_dir():
        pytest.skip("../shared/snapshots is absent")
    return SHARED_SNAPSHOTS


@pytest.fixture(scope="session")
def expected_figures(shared_snapshots_dir: Path) -> dict[str, Any]:
    path = shared_snapshots_dir / "expected.json"
    if not path.exists():
        pytest.skip("../shared/snapshots/expected.json is absent")
    figures: dict[str, Any] = json.loads(path.read_text())
    return figures


@pytest.fixture
def hand_file(tmp_path: Path) -> Path:
    """docs/concepts.md's worked example (snapshot_builders.hand_snapshot) as a pickle file."""
    p = tmp_path / "hand.pickle"
    p.write_bytes(pickle.dumps(hand_snapshot(), protocol=4))
    return p


# Started in the background by a shell without job control (`cmd &`, nohup, some CI
# runners), pytest and its workers ignore SIGINT, and so does every process a test starts
# (Python installs no handler for a signal ignored at start-up): the Ctrl-C tests
# (tests/inspect/test_inspect_lifecycle.py, test_view_first_paint.py's stop) would wait for
# a child that never stops. Each process of the run takes Ctrl-C as a foreground one would.
def pytest_configure(config):
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Every test gets its own column cache so tests never see each other's files."""
    monkeypatch.setenv("MEMLENS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


def _own_cache(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[None]:
    patch = pytest.MonkeyPatch()
    patch.setenv("MEMLENS_CACHE_DIR", str(tmp_path_factory.mktemp(name)))
    yield
    patch.undo()


# Session- and module-scoped fixtures are set up before the per-test cache above. Without
# these two they would read and write the user's own cache (~/.cache/memlens): a snapshot a
# module's fixture loads would come from an earlier run's entry, never read, so neither
# reader would be tested on it (MEMLENS_READER=both compares only what it builds).
@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory):
    yield from _own_cache(tmp_path_factory, "cache-session")


@pytest.fixture(scope="module", autouse=True)
def _module_cache(tmp_path_factory):
    yield from _own_cache(tmp_path_factory, "cache-module")


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium, shared by the tests of one module (it takes a second to start).
    Not longer: Playwright's sync API keeps an asyncio loop running while it is open, and
    the TUI tests (Textual's pilot) need to start their own loop in the same worker."""
    from chromium import launch_browser

    yield from launch_browser()

"""A 64-rank synthetic fleet with three planted outliers, made once per session (small
ranks: the whole suite runs on 2 cores)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fleet_data import EVENTS, PLANTED, RANKS

from memlens.simulation.synthetic_fleet import write_fleet


@pytest.fixture(scope="session")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    write_fleet(out, RANKS, PLANTED, events=EVENTS)
    return out

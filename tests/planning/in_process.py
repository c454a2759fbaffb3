"""A plan runner that simulates its points in the test's own process, one after the
other (no pool), to keep the interpolation tests in seconds."""

from __future__ import annotations

from collections.abc import Iterator

from memlens.planning.request import PointRequest
from memlens.planning.runner import Runner
from memlens.planning.worker import PointFigures, simulate_point


class InProcess(Runner):
    """The runner, its points simulated here one after the other (no pool)."""

    def _simulate(self, jobs: list[tuple[int, PointRequest]]) -> Iterator[tuple[int, PointFigures]]:
        for i, request in jobs:
            yield i, simulate_point(request)

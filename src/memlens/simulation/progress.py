"""Progress of a running simulation: every few seconds, from a daemon thread, what the run
has done so far (optimizer steps, allocator events, the peaks), for `memlens simulate` to
show while a long script runs (it printed nothing for minutes before)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memlens.analysis.allocator_model import CachingAllocator

# Seconds between two reports by default: often enough to see it move, rarely enough to
# cost nothing (one read of a few counters).
DEFAULT_EVERY = 3.0


@dataclass(frozen=True)
class SimProgress:
    """The run so far: seconds since it started, optimizer steps taken (torch.optim's
    step, every optimizer), allocator trace events, and the largest active and reserved
    bytes seen (the allocator's peaks, kept across a reset of its statistics)."""

    elapsed: float
    steps: int
    events: int
    peak_active: int
    peak_reserved: int


class ProgressTicker:
    """Calls `report` every `every` seconds while started. The reads are of counters the
    simulation's thread updates (ints and a list's length under the GIL): the ticker
    never touches torch's state beyond a global optimizer hook counting steps."""

    def __init__(
        self,
        allocator: CachingAllocator,
        report: Callable[[SimProgress], None],
        every: float = DEFAULT_EVERY,
    ) -> None:
        self.allocator, self.report, self.every = allocator, report, every
        self.steps = 0
        self._peaks = (0, 0)
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._hook: Any = None

    def now(self) -> SimProgress:
        a = self.allocator
        active, reserved = self._peaks
        self._peaks = (max(active, a.peak_allocated), max(reserved, a.peak_reserved))
        return SimProgress(time.monotonic() - self._started, self.steps, len(a.trace), *self._peaks)

    def start(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        def stepped(*_: Any) -> None:
            self.steps += 1

        self._hook = register_optimizer_step_post_hook(stepped)
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="memlens-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.report(self.now())

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

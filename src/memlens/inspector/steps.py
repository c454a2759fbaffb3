"""Which training step it is, and whether it is sampled (no torch; the Inspector drives it).

A step ends at ``ins.step()`` or, with ``step_on="auto"`` until ``step()`` is first called
and with ``step_on="forward"``, at the next forward call of the model. A step is sampled
when its index is a multiple of ``every`` and, with ``max_per_second``, when enough time
has passed since the last sampled one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class StepCounter:
    def __init__(
        self,
        *,
        every: int | None,
        max_per_second: float | None,
        step_on: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.every = every
        self.max_per_second = max_per_second
        self.step_on = step_on
        self.index = 0
        self.forwards = 0  # forward calls of the model in this step
        self._manual = step_on == "call"  # steps end only at step()
        self._clock = clock
        self._last_sample_t = -math.inf

    def forward_ends_step(self) -> bool:
        """Count a forward call of the model. True if it begins a new step: end the current
        one, then call ``advance(forwards=1)``."""
        self.forwards += 1
        return not self._manual and self.forwards > 1

    def step_call_ends_step(self) -> bool:
        """``ins.step()`` was called. True if that ends the step (not with step_on="forward")."""
        if self.step_on == "auto":
            self._manual = True  # from now on only step() ends a step
        return self.step_on != "forward"

    def advance(self, forwards: int = 0) -> None:
        self.index += 1
        self.forwards = forwards

    def due(self) -> float | None:
        """The time to pass to ``taken`` if the current step is to be sampled, else None."""
        if self.every is not None and self.index % self.every:
            return None
        now = self._clock()
        if (
            self.max_per_second is not None
            and now - self._last_sample_t < 1.0 / self.max_per_second
        ):
            return None
        return now

    def taken(self, now: float) -> None:
        """The step is sampled (the rate limit counts from ``now``)."""
        self._last_sample_t = now

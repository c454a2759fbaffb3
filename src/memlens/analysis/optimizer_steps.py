"""Optimizer steps as event windows: which step (if any) each trace event belongs to.

A step is an optimizer-step stage (an annotation such as PyTorch's own
"Optimizer.step#AdamW.step", or an nvtx/record_function range named like "optimizer step"),
and, for events no such stage covers, one optimizer call read from the stacks: a run of
consecutive events whose stacks are inside the optimizer, events without a stack bridging
the run (they say nothing either way). Categories use the windows to tell optimizer state
(outlives its step) from the step's scratch (made and freed inside one step).
"""

from __future__ import annotations

import re

import numpy as np

from memlens.analysis.inferred_steps import stack_runs
from memlens.analysis.stages import stage_intervals
from memlens.snapshot.model import DeviceTrace

# Stage names of an optimizer step: "Optimizer.step#AdamW.step", "optimizer step", ...
STEP_STAGE = re.compile(r"(?i)optim\w*[ ._#:/-]*(\w+[ ._#:/-]*)?step|step[ ._#:/-]*optim")


def step_of_events(dev: DeviceTrace, optimizer_stack: np.ndarray) -> tuple[np.ndarray, int]:
    """(per event: id of the optimizer step it is in, -1 outside any; the id of a step
    already running at the first event (it began before the trace), -1 when none).
    A stage began before the trace only when its START is missing (a START stamped before
    the first event was recorded, so nothing was allocated between the two); a call read
    from the stacks, when the first event is in it.

    optimizer_stack: per stack id, is it inside an optimizer step (zero_grad excluded).
    Stage steps are numbered first, stack-read calls after them."""
    n = dev.n_events
    stage = np.full(n, -1, dtype=np.int64)
    open_at_start = -1
    steps = [s for s in stage_intervals(dev, inferred=False) if STEP_STAGE.search(s["name"])]
    # outer stages written last, so a stage nested in another step stage joins it
    for k in range(len(steps) - 1, -1, -1):
        s = steps[k]
        stage[max(s["first_event"], 0) : s["last_event"] + 1] = k
        if s["open_start"] and s["last_event"] >= 0:
            open_at_start = k
    calls = stack_runs(dev, optimizer_stack)
    if open_at_start < 0 and n and stage[0] < 0 and calls[0] >= 0:
        open_at_start = len(steps) + int(calls[0])
    out = np.where(stage >= 0, stage, np.where(calls >= 0, calls + len(steps), -1))
    return out, open_at_start

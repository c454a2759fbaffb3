"""`python -m torchtitan.train`, unedited, on torch 2.13 as on 2.14 and later.

torchtitan 0.3.0 uses two things torch 2.13 lacks (a GPU run with torch 2.13 stops on
them too); neither changes memory, so on a torch without them this adds them, then runs
torchtitan's own entry point with the command line as given. On torch 2.14 and later it
adds nothing.
- `torch.distributed.set_timeout` (new in torch 2.14), called after the first training
  step to shorten the process groups' timeouts: here a no-op (a timeout has no memory).
- the pipeline schedules' pre-split inputs: torchtitan splits the batch into microbatches
  itself and calls `schedule.step(arg_mbs=..., kwarg_mbs=..., target_mbs=...)`, keywords
  torch 2.14 added. torch 2.13's `step(*args, target=None, ..., **kwargs)` takes them as
  the model's keyword arguments and splits those into microbatches again (a microbatch's
  one-sample tensors split into one chunk, not two), so the run stops before the first
  microbatch (`ValueError: Expecting 2 arg_mbs but got 1`). Here
  `step` hands the microbatches as given to the schedule's `_step_microbatches`, which
  runs them as torch 2.14's `step` does.
"""

from __future__ import annotations

import runpy
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch.distributed.pipelining import schedules


def _set_timeout(timeout: timedelta, group: Any = None) -> None:
    """torch 2.14's set_timeout, as nothing: timeouts have no memory."""


def _pre_split(step: Callable[..., Any]) -> Callable[..., Any]:
    """`step` taking torch 2.14's arg_mbs / kwarg_mbs / target_mbs (one entry a microbatch)."""

    def step_with_microbatches(
        self: Any,
        *args: Any,
        arg_mbs: list[Any] | None = None,
        kwarg_mbs: list[Any] | None = None,
        target_mbs: list[Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        if arg_mbs is None and kwarg_mbs is None and target_mbs is None:
            return step(self, *args, **kwargs)
        run = self._step_microbatches

        # with no whole-batch input, step splits nothing and passes empty microbatches here
        def given(_args: Any, _kwargs: Any, _targets: Any, *rest: Any, **more: Any) -> Any:
            return run(arg_mbs, kwarg_mbs, target_mbs, *rest, **more)

        self._step_microbatches = given
        try:
            return step(self, *args, **kwargs)
        finally:
            del self._step_microbatches

    return step_with_microbatches


if not hasattr(dist, "set_timeout"):
    dist.set_timeout = _set_timeout  # type: ignore[attr-defined]
if "arg_mbs" not in schedules.PipelineScheduleSingle.step.__code__.co_varnames:
    for schedule in (schedules.PipelineScheduleSingle, schedules.PipelineScheduleMulti):
        schedule.step = _pre_split(schedule.step)  # type: ignore[method-assign]
runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)

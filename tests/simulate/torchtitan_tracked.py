"""torchtitan's trainer (through torchtitan_train.py, unedited) with its last training
step run under PyTorch's FSDPMemTracker, for test_simulate_torchtitan.py (issue 36).

`Trainer.train_step` is wrapped: on the last step (`--training.steps`) it resets the
allocator's peak, runs the step inside `FSDPMemTracker(model, adamw)` (the AdamW inside
torchtitan's optimizer container, which holds the state) and writes to
$MEMLENS_TRACKER_OUT ({rank} replaced) the allocator's peak over the step
(`torch.cuda.max_memory_allocated`, memlens's answer under `memlens simulate`; torchtitan's
metrics reset it after logging, so the peak at each reset counts too) and the tracker's
peak, in all and by kind. Everything else is torchtitan's: its model, its parallelize
function, its mesh, its data and its optimizer.

What the tracker needs, and would on a GPU too:
- FSDPMemTracker is a dispatch mode without `supports_higher_order_operators`, so it
  refuses the debug model's `flex_attention` ("no rule registered for
  HigherOrderOperator"): mem_tracker_rules.py gives it the rule it lacks;
- while a dispatch mode is on the stack Dynamo compiles nothing, and flex_attention's own
  compile (fullgraph, which it uses even when called uncompiled) then stops the run
  ("torch.compile with fullgraph=True found no compiled frames"); PyTorch's switch for
  running it uncompiled, `_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG`, is set for the tracked
  step, so the HOP runs its dense implementation. The tracked step is eager throughout.
MEMLENS_TRACKER=none runs the same step without the tracker (its peak only: compiled, as
torchtitan runs it); MEMLENS_TRACKER_COLLECT=1 runs gc.collect() before the step.
"""

from __future__ import annotations

import gc
import json
import os
import runpy
from pathlib import Path
from typing import Any

import mem_tracker_rules
import torch
import torch.nn.attention.flex_attention as flex
from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
from torchtitan.components.metrics import DeviceMemoryMonitor
from torchtitan.trainer import Trainer

mem_tracker_rules.add_flex_attention_rules(FSDPMemTracker)
# MEMLENS_TRACKER=none: the last step without the tracker (its peak only)
TRACK = os.environ.get("MEMLENS_TRACKER", "fsdp") != "none"
# MEMLENS_TRACKER_COLLECT=1: a gc.collect() before that step (torchtitan turns automatic
# collection off; it collects every --training.gc_freq steps)
COLLECT = os.environ.get("MEMLENS_TRACKER_COLLECT") == "1"
_train_step = Trainer.train_step
_reset_peak_stats = DeviceMemoryMonitor.reset_peak_stats
# the allocator's peak each time torchtitan's metrics reset it (after logging a step)
peaks_at_reset: list[int] = []


def reset_peak_stats(self: Any) -> None:
    peaks_at_reset.append(torch.cuda.max_memory_allocated())
    _reset_peak_stats(self)


def tracked_train_step(self: Any, data_iterator: Any) -> None:
    if self.step != self.config.training.steps:
        _train_step(self, data_iterator)
        return
    (model,) = self.model_parts  # one model part: no pipeline
    # the container's own `state` is empty: the tracker must see the AdamW that holds it
    (optimizer,) = self.optimizers.optimizers
    before = max([*peaks_at_reset, torch.cuda.max_memory_allocated()])
    torch.cuda.reset_peak_memory_stats()
    peaks_at_reset.clear()
    if COLLECT:
        gc.collect()
    tracker = FSDPMemTracker(model, optimizer) if TRACK else None
    if tracker is None:  # the same step untracked: flex_attention compiled, as torchtitan runs it
        _train_step(self, data_iterator)
        write_marks({"peak": max([*peaks_at_reset, torch.cuda.max_memory_allocated()])})
        return
    # Dynamo compiles nothing while the tracker is on the dispatch stack, and
    # flex_attention's own compile (fullgraph, eager backend) then refuses to run; PyTorch's
    # switch for running it uncompiled calls the HOP directly (its dense implementation)
    flex.__dict__["_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG"] = True
    try:
        with tracker:
            _train_step(self, data_iterator)
    finally:
        flex.__dict__["_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG"] = False
    write_marks(
        {
            "peak_before": before,
            "peak": max([*peaks_at_reset, torch.cuda.max_memory_allocated()]),
            "end": torch.cuda.memory_allocated(),
            "tracker_peak": mem_tracker_rules.tracker_peak(tracker),
            "tracker_by_kind": mem_tracker_rules.peak_by_kind(tracker),
        }
    )


def write_marks(marks: dict[str, Any]) -> None:
    out = os.environ["MEMLENS_TRACKER_OUT"].format(rank=os.environ.get("RANK", "0"))
    Path(out).write_text(json.dumps(marks))


Trainer.train_step = tracked_train_step
DeviceMemoryMonitor.reset_peak_stats = reset_peak_stats
runpy.run_path(str(Path(__file__).with_name("torchtitan_train.py")), run_name="__main__")

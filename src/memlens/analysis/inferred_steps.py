"""Training steps read from the trace itself, for recordings without step annotations.

People record with `_record_memory_history()` and nothing else: none of the real
snapshots we were given marks its steps. The trace still shows them:

* an **optimizer call** is a run of consecutive events whose stacks are inside the
  optimizer's step (torch/optim, `Optimizer.step`; zero_grad excluded), stackless events
  bridged (`stack_runs`);
* **backward** is the events whose stacks hold autograd's engine or generated nodes.

With optimizer calls, step k runs from the event after call k-1 to the end of call k (the
first from the first event); events after the last call are one more step, left open (it
had not reached its optimizer when the recording stopped), if they allocate anything. Without any, each run of
backward events ends a step (runs closer than the shorter of the two are one backward).
Inside a step, phases: "forward" up to its first backward event, "backward" to its last
backward event before the optimizer call, "optimizer" the call.

A trace whose stacks show neither (inference, a forward pass, torch.compile's autotuner
benchmarking one kernel after another) has no inferred step: its repetition is layers or
benchmark runs. A trace recorded without stacks has only repetition to go on: steps are
then the repeated allocation sequence of a loop in a steady state (repeated_steps), with
no phases (`inferred_from` says which).

Inferred stages are marked "inferred" and nest among themselves (a step at depth 0, its
phases at depth 1). They are inferred only when the annotations hold no repeated stage
of the user's (PyTorch's own optimizer ranges and torch.compile's dynamo_timed ranges do
not count: they are there without the user asking). Cost: a few array passes over the
events, plus one regex per distinct frame (memoized per device).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from memlens.analysis.events import memo, rows_allocated_in
from memlens.analysis.matching import stack_matches
from memlens.analysis.repeated_steps import repeated_steps, stackless
from memlens.snapshot.model import DeviceTrace

# Frame patterns (searched in "filename:line:name"); categories uses them too.
BACKWARD = (
    r"torch::autograd::Engine::|autograd::generated::|Backward\d*::apply|"
    r"CopyBackwards|CopySlices|[/\\]torch[/\\]autograd[/\\].*:(backward|_engine_run_backward)$"
)
OPTIMIZER = r"[/\\]torch[/\\]optim[/\\]|Optimizer\.step|zero_grad"
ZERO_GRAD = r"zero_grad"

# Annotations PyTorch writes by itself: not the user's marking of steps.
AUTOMATIC_ANNOTATION = re.compile(r"^Optimizer\.\w+#|\(dynamo_timed\)$")

_NUMBERED = re.compile(r"#\d+$")

STEP, FORWARD, BACKWARD_PHASE, OPTIMIZER_PHASE = "step", "forward", "backward", "optimizer"


class InferredStage(NamedTuple):
    name: str  # "step#3" (numbered from 1) or a phase: "forward", "backward", "optimizer"
    first_event: int
    last_event: int
    depth: int  # 0: a step; 1: a phase of the step before it
    open_end: bool  # the recording stopped inside it


def stack_runs(dev: DeviceTrace, stack_flag: np.ndarray) -> np.ndarray:
    """Per event: the index of the run (consecutive events whose stack has the flag,
    stackless events between two events of one run bridged) it is in, -1 outside."""
    n = dev.n_events
    out = np.full(n, -1, dtype=np.int64)
    stacks = dev.stack.astype(np.int64)
    known = np.flatnonzero(stacks >= 0)
    if len(known) == 0 or len(stack_flag) == 0:
        return out
    inside = stack_flag[stacks[known]]
    starts = inside & ~np.concatenate([[False], inside[:-1]])
    run = np.where(inside, np.cumsum(starts) - 1, -1)
    out[known] = run
    # a stackless event belongs to a run when the known events on both sides are in it
    pos = np.arange(n)
    has = np.zeros(n, dtype=bool)
    has[known] = True
    prev = np.maximum.accumulate(np.where(has, pos, -1))
    nxt = np.minimum.accumulate(np.where(has, pos, n)[::-1])[::-1]
    gap = ~has & (prev >= 0) & (nxt < n)
    before = out[np.where(gap, prev, 0)]
    after = out[np.where(gap, np.minimum(nxt, n - 1), 0)]
    bridged = gap & (before >= 0) & (before == after)
    out[bridged] = before[bridged]
    return out


def _spans(runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first event, last event) of each run of stack_runs' output, in order."""
    ev = np.flatnonzero(runs >= 0)
    if len(ev) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    r = runs[ev]
    edge = np.flatnonzero(np.diff(r)) + 1
    first = ev[np.r_[0, edge]]
    last = ev[np.r_[edge - 1, len(ev) - 1]]
    return first, last


def is_inferred_step(stage: Mapping[str, Any]) -> bool:
    """Is this stage_intervals row an inferred step (not a phase, not annotated)? Its depth
    does not tell: an annotated range may hold it (stage_nesting)."""
    return bool(stage["inferred"]) and stage["base_name"] == STEP


def user_marks_steps(names: Sequence[str]) -> bool:
    """Do the annotated stages (names, one per stage) hold a repeated stage of the
    user's? Then those are the steps and nothing is inferred."""
    seen: set[str] = set()
    for name in names:
        if AUTOMATIC_ANNOTATION.search(name):
            continue
        b = _NUMBERED.sub("", name)  # stages.base_name: "ProfilerStep#3" -> "ProfilerStep"
        if b in seen or b != name:  # "ProfilerStep#1" alone names a step too
            return True
        seen.add(b)
    return False


def inferred_stages(dev: DeviceTrace) -> list[InferredStage]:
    """The steps and phases of `dev` read from its stacks, in start order (a step before
    its phases); empty when it has no optimizer call and no backward."""
    return memo(dev, "inferred_stages", lambda: _infer(dev))


def inferred_from(dev: DeviceTrace) -> str:
    """What the inferred steps of `dev` were read from, for the notes that present them."""
    if stackless(dev):
        return (
            "the repetition of the allocation sequence alone (no stacks were recorded): "
            "step#N (inferred), without phases"
        )
    return (
        "the trace (optimizer calls, backward's autograd frames): step#N (inferred) and its phases"
    )


def _infer(dev: DeviceTrace) -> list[InferredStage]:
    n = dev.n_events
    if n == 0:
        return []
    snap = dev.snapshot
    opt = stack_matches(snap, OPTIMIZER) & ~stack_matches(snap, ZERO_GRAD)
    o_first, o_last = _spans(stack_runs(dev, opt))
    bw_runs = stack_runs(dev, stack_matches(snap, BACKWARD))
    if len(o_first):
        ends = o_last
    else:
        b_first, b_last = _spans(bw_runs)
        if len(b_first) == 0:
            # without stacks, the repetition of the allocations (with stacks showing
            # neither, this is no training loop)
            rep = repeated_steps(dev) if stackless(dev) else []
            return [InferredStage(f"{STEP}#{k + 1}", a, b, 0, o) for k, (a, b, o) in enumerate(rep)]
        # a backward interrupted briefly (a hook, a stackless stretch) is one backward
        keep = np.ones(len(b_first), bool)
        length = b_last - b_first + 1
        gap = b_first[1:] - b_last[:-1] - 1
        keep[1:] = gap >= np.minimum(length[1:], length[:-1])
        ends = b_last[np.r_[keep[1:], True]]
    starts = np.r_[0, ends[:-1] + 1]
    opens = np.zeros(len(ends), bool)
    # the recording stopped before this step's end: a step when it allocated anything
    if ends[-1] < n - 1 and len(rows_allocated_in(dev, int(ends[-1]), n - 1)):
        starts, ends = np.r_[starts, ends[-1] + 1], np.r_[ends, n - 1]
        opens = np.r_[opens, True]
    bw_event = np.flatnonzero(bw_runs >= 0)
    out: list[InferredStage] = []
    for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        out.append(InferredStage(f"{STEP}#{k + 1}", a, b, 0, bool(opens[k])))
        # the optimizer call ending this step, if it has one
        call = -1
        if len(o_first):
            i = int(np.searchsorted(o_last, b))
            if i < len(o_last) and o_last[i] == b:
                call = max(int(o_first[i]), a)
        bw_end = call - 1 if call >= 0 else b
        lo, hi = np.searchsorted(bw_event, [a, bw_end + 1])
        if hi > lo:
            f, t = int(bw_event[lo]), int(bw_event[hi - 1])
            if f > a:
                out.append(InferredStage(FORWARD, a, f - 1, 1, False))
            out.append(InferredStage(BACKWARD_PHASE, f, t, 1, False))
        if call >= 0:
            out.append(InferredStage(OPTIMIZER_PHASE, call, b, 1, False))
    return out

"""Training steps found from repetition alone, for traces recorded without stacks.

When a trace carries no stacks (`_record_memory_history(stacks=None)`, or an old
`record_context=False`), neither the optimizer call nor backward's autograd frames can be
seen (inferred_steps), and repetition is all there is to go on: a training loop allocates
the same sequence of sizes, step after step. Where stacks are recorded and show neither, the
trace is not a training loop (a forward pass, inference, torch.compile's autotuner timing a
kernel over and over) and nothing here is tried: repetition in it is layers or benchmark
runs, not steps.

The search, on the allocations (alloc events) as tokens (size, and stack where present):

1. **Anchor**: the K tokens starting at the first allocation (then, when those do not
   repeat as below, at a quarter and at half of the allocations: a recording may begin
   with setup, or with a first step unlike the others).
2. **Period**: for each distance between two occurrences of the anchor, shortest first,
   boundaries are the anchor's occurrences at least that far apart; it is the step's length
   when every unit between two boundaries after the first has exactly that length and the
   tokens repeat with it from the second boundary to the end (the first unit may differ:
   optimizer state and lazy setup are allocated once); the units (and one before them)
   cover at least COVER of the allocations.
3. **Memory**: the active bytes at the start of units 2, 3, ... (and at the end of the last
   whole unit) agree within STEADY of the trace's peak (a loop in a steady state: a
   forward pass with autograd grows at every layer), and inside a unit the active bytes rise
   at least SWING above its start (a step holds its activations, a layer of an inference
   pass only its temporaries).

Step k starts at the first allocation of its unit (the first at the first event: setup
before the first unit is step 1's) and ends at the event before the next one; the events
after the last boundary are the last step, left open when they are fewer allocations than
a unit. Steps found this way have no phases: without stacks, forward, backward and the
optimizer look alike. Cost: per anchor, a pass of K comparisons per allocation, then one
comparison over half the allocations per candidate period (at most MAX_PERIODS, none that
would make more than MAX_STEPS steps), and a binary search per boundary it keeps.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace

K = 8  # tokens in an anchor
COVER = 0.8  # units cover at least this share of the allocations
STEADY = 0.01  # unit starts agree within this share of the peak active bytes
SWING = 0.1  # a unit's peak is at least this share above its start
# candidate periods per anchor, shortest first: a step holds a few hundred occurrences of
# an anchor at most (one per layer and pass); each costs a comparison over half the trace
MAX_PERIODS = 512
# steps in one recording at most: a period that makes more is not a training step (200,000
# stackless allocations of one size made 200,000 one-allocation steps, minutes of tables);
# it also bounds the boundaries and units each candidate period builds (n / period)
MAX_STEPS = 10_000


def stackless(dev: DeviceTrace) -> bool:
    """Does no allocation of `dev` carry a stack (so stacks can tell nothing)?"""
    allocs = dev.action == Action.ALLOC
    return bool(allocs.any()) and not bool((dev.stack[allocs] >= 0).any())


def repeated_steps(dev: DeviceTrace) -> list[tuple[int, int, bool]]:
    """(first event, last event, open_end) per step found from repetition (the module
    docstring), in order; empty when the allocations do not repeat as a training loop's."""
    al = np.flatnonzero(dev.action == Action.ALLOC)
    n = len(al)
    if n < 2 * K:
        return []
    key = dev.size[al].astype(np.int64) * (1 << 20) + dev.stack[al].astype(np.int64)
    tok = np.unique(key, return_inverse=True)[1].astype(np.int64).reshape(-1)
    windows = sliding_window_view(tok, K)
    for a in dict.fromkeys((0, n // 4, n // 2)):
        if a + K > n:
            continue
        occ = np.flatnonzero((windows == tok[a : a + K]).all(axis=1))
        # a step's length is a distance from the anchor to another occurrence, or between
        # two (the first unit may be longer)
        periods = np.unique(np.r_[np.diff(occ), np.abs(occ - a)])
        periods = periods[periods * MAX_STEPS >= n]
        for period in periods[:MAX_PERIODS].tolist():
            half = n // 2
            if half + period >= n or (tok[half : n - period] != tok[half + period :]).mean() > 0.01:
                continue  # the second half does not repeat at this distance: cheap rejection
            bounds = _boundaries(occ, period)
            if not _periodic(tok, bounds, period):
                continue
            starts = _phase(dev, al, tok, bounds[1], period)
            # the units, and one before the first (a first step unlike the others), cover
            # most of the allocations: not a repeated stretch of something else
            covered = n - max(starts[0] - period, 0) >= COVER * n
            if covered and _steady(dev, al, starts, period):
                return _steps(dev, al, starts, period)
    return []


def _phase(dev: DeviceTrace, al: np.ndarray, tok: np.ndarray, b1: int, period: int) -> list[int]:
    """Units' first allocations: where, in a unit after the first, active bytes are lowest
    (a step ends when its activations are freed), repeated every period back (while the
    unit before matches) and forward (_periodic checked all of that)."""
    n = len(tok)
    span = al[b1 : min(b1 + period, n)]
    first = b1 + int(np.argmin(np.asarray(dev.active_after)[span - 1]))
    while first - period >= 0 and np.array_equal(
        tok[first - period : first], tok[first : first + period]
    ):
        first -= period
    return [b for b in range(first, n, period) if b > 0]


def _boundaries(occ: np.ndarray, period: int) -> list[int]:
    """Occurrences of the anchor kept at least `period` apart, from the first: a jump per
    boundary (a binary search), not a step per occurrence."""
    out = [int(occ[0])]
    while True:
        i = int(np.searchsorted(occ, out[-1] + period, side="left"))
        if i >= len(occ):
            return out
        out.append(int(occ[i]))


def _periodic(tok: np.ndarray, bounds: list[int], period: int) -> bool:
    """From the second boundary on, the tokens repeat with `period` to the end (the
    recording may stop inside a unit), and every unit after the first is one period long."""
    n = len(tok)
    if len(bounds) < 2 or (np.diff(bounds)[1:] != period).any():
        return False
    b1 = bounds[1]
    return np.array_equal(tok[b1 : n - period], tok[b1 + period :])


def _steady(dev: DeviceTrace, al: np.ndarray, starts: list[int], period: int) -> bool:
    """Memory returns to one level at each unit's start and rises well above it inside
    (each whole unit after the first: to the next start, the last to the trace's end)."""
    act = np.asarray(dev.active_after)
    events = [int(al[b]) for b in starts]
    levels = act[np.asarray(events, np.int64) - 1]
    if int(levels.max() - levels.min()) > STEADY * dev.peak_active_bytes:
        return False
    ends = events[1:] + ([dev.n_events] if starts[-1] + period <= len(al) else [])
    rises = [int(act[s:e].max()) - int(act[s - 1]) for s, e in zip(events, ends)]
    return bool(rises) and float(np.median(rises)) >= SWING * max(int(levels.min()), 1)


def _steps(
    dev: DeviceTrace, al: np.ndarray, starts: list[int], period: int
) -> list[tuple[int, int, bool]]:
    firsts = [0] + [int(al[b]) for b in starts]
    lasts = [f - 1 for f in firsts[1:]] + [dev.n_events - 1]
    open_end = len(al) - starts[-1] < period
    return [
        (f, t, open_end and k == len(firsts) - 1) for k, (f, t) in enumerate(zip(firsts, lasts))
    ]

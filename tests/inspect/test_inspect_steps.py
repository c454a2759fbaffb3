"""StepCounter: when steps end and which are sampled (no torch, a fake clock)."""

from __future__ import annotations

from memlens.inspector.steps import StepCounter


def _drive(counter: StepCounter, events: str) -> list[int]:
    """Feed 'f' (forward call) and 's' (ins.step()); the step index after each event."""
    seen = []
    for e in events:
        if e == "f" and counter.forward_ends_step():
            counter.advance(forwards=1)
        if e == "s" and counter.step_call_ends_step():
            counter.advance()
        seen.append(counter.index)
    return seen


def test_auto_counts_forwards_until_step_is_first_called():
    c = StepCounter(every=1, max_per_second=None, step_on="auto")
    #                   f  f  f  s  f  f  s  f
    assert _drive(c, "fffsffsf") == [0, 1, 2, 3, 3, 3, 4, 4]


def test_call_counts_only_step_calls():
    c = StepCounter(every=1, max_per_second=None, step_on="call")
    assert _drive(c, "fffsffs") == [0, 0, 0, 1, 1, 1, 2]


def test_forward_counts_only_forwards():
    c = StepCounter(every=1, max_per_second=None, step_on="forward")
    assert _drive(c, "fsfsf") == [0, 0, 1, 1, 2]
    assert c.forwards == 1


def test_every_samples_multiples_of_every():
    c = StepCounter(every=3, max_per_second=None, step_on="call")
    due = []
    for _ in range(7):
        due.append(c.due() is not None)
        c.advance()
    assert due == [True, False, False, True, False, False, True]


def test_rate_limit_counts_from_the_last_sampled_step():
    t = [0.0]
    c = StepCounter(every=None, max_per_second=2, step_on="call", clock=lambda: t[0])
    taken = []
    for now in (0.0, 0.2, 0.49, 0.5, 0.7, 1.1):
        t[0] = now
        when = c.due()
        if when is not None:
            c.taken(when)
            taken.append(now)
        c.advance()
    assert taken == [0.0, 0.5, 1.1]


def test_a_step_not_taken_does_not_start_the_rate_limit():
    # the background process was gone: due() said yes but nothing was sampled
    t = [0.0]
    c = StepCounter(every=None, max_per_second=1, step_on="call", clock=lambda: t[0])
    assert c.due() == 0.0
    t[0] = 0.1
    assert c.due() == 0.1

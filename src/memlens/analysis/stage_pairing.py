"""Pairing annotation STARTs with ENDs into stages, as `record_function` makes them.

A `record_function` range logs a START when it is entered and an END when it is left; the
snapshot keeps only the name and the time, not which range object each came from. Ranges
of one name are left in the reverse order they were entered (a range cannot be left
before the ones of its name entered inside it), so an END closes the latest open START of
its name, and only that one: ranges of other names stay open. Ranges of different names
may cross: under Lightning, `Optimizer.step` is entered inside the trainer's "forward"
range and left before its "optimizer" range, which it opened. Such a range keeps its own
START and END and is flagged `crosses`; it is not cut at its neighbour's END.

Nesting is then read from the pairs: a stage's parent is the innermost stage that holds
it whole (opened before it, closed after it, in annotation order, so stamps in the same
microsecond keep their file order), and its depth is the number of stages that hold it.
Edges, as the ring buffer leaves them: an END with no START began before the trace; a
START with no END runs to the end.

Cost: the usual sequence (properly nested, nothing open at either edge) is paired with
array passes; anything else with one pass over the annotations plus a sort of the stages.
"""

from __future__ import annotations

from bisect import bisect_right, insort

import numpy as np

# a stage open at an edge: no START (began before the trace) / no END (still running)
NO_START, NO_END = -(2**62), 2**62

# Paired stages, one entry per stage in the order their START (or lone END) comes:
# (annotation index of its name, t0 or NO_START, t1 or NO_END, depth, parent or -1,
#  crosses: it overlaps another stage without either holding the other)
Pairs = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def pair_nested(ids: np.ndarray, stage: np.ndarray, times: np.ndarray) -> Pairs | None:
    """Pairing without a Python loop for the usual case: every END closes the innermost
    open START, with the same name, and nothing is open at either edge. Then, per nesting
    level, the annotations alternate START, END, START, END... None when that fails."""
    idx = np.flatnonzero(stage <= 1)  # START 0, END 1; the rest (OTHER) take no part
    if len(idx) == 0 or len(idx) % 2:
        return None
    is_start = stage[idx] == 0
    after = np.cumsum(np.where(is_start, 1, -1))
    if after.min() < 0 or after[-1] != 0:
        return None
    level = after - is_start  # a START's depth before it; an END's depth after it
    by_level = np.lexsort((np.arange(len(idx)), level))
    s_pos, e_pos = by_level[0::2], by_level[1::2]
    if not (
        is_start[s_pos].all()
        and not is_start[e_pos].any()
        and (level[s_pos] == level[e_pos]).all()
        and (ids[idx[s_pos]] == ids[idx[e_pos]]).all()
    ):
        return None
    o = np.argsort(s_pos, kind="stable")  # stages in START order
    s_pos, e_pos = s_pos[o], e_pos[o]
    depth = level[s_pos]
    # parent: the last START one level up before it (still open: the sequence is nested)
    key = depth * (len(idx) + 1) + s_pos
    key_order = np.argsort(key, kind="stable")
    rank = np.searchsorted(key[key_order], (depth - 1) * (len(idx) + 1) + s_pos) - 1
    parent = np.where(depth > 0, key_order[np.maximum(rank, 0)], -1)
    crosses = np.zeros(len(s_pos), bool)
    return idx[s_pos], times[idx[s_pos]], times[idx[e_pos]], depth, parent, crosses


def pair_loop(names: list[str], stage: np.ndarray, times: np.ndarray) -> Pairs:
    """Pairing, annotation by annotation: an END closes the latest open START of the same
    name; then nesting and crossings from the pairs (the module docstring)."""
    n = len(names)
    ann: list[int] = []
    first: list[int] = []  # position of the START (-1: none) ...
    last: list[int] = []  # ... and of the END (n: none), in annotation order
    open_by_name: dict[str, list[int]] = {}
    for i, (name, st) in enumerate(zip(names, stage.tolist())):
        if st == 0:
            open_by_name.setdefault(name, []).append(len(ann))
            ann.append(i)
            first.append(i)
            last.append(n)
        elif st == 1:
            opened = open_by_name.get(name)
            if opened:
                last[opened.pop()] = i
            else:  # began before the trace: it encloses everything before it
                ann.append(i)
                first.append(-1)
                last.append(i)
    depth, parent, crosses = _nesting(first, last)
    t = times.tolist()
    t0 = [NO_START if s < 0 else t[s] for s in first]
    t1 = [NO_END if e >= n else t[e] for e in last]
    cols = (ann, t0, t1, depth, parent)
    return (*(np.asarray(c, np.int64) for c in cols), np.asarray(crosses, bool))  # type: ignore[return-value]


def _nesting(first: list[int], last: list[int]) -> tuple[list[int], list[int], list[bool]]:
    """(depth, parent, crosses) of stages given by their START and END positions."""
    m = len(first)
    depth, parent, crosses = [0] * m, [-1] * m, [False] * m
    # outer before inner: by START, then the later END first, then pairing order
    order = sorted(range(m), key=lambda k: (first[k], -last[k], k))
    holders: list[int] = []  # a chain of stages, each holding the next
    ends: list[tuple[int, int]] = []  # (END, stage) of the stages seen, sorted
    for k in order:
        s, e = first[k], last[k]
        # a holder that does not hold k ended before k began, or crosses it; either way
        # it holds no later stage that k does not (those begin after k)
        while holders and last[holders[-1]] < e:
            holders.pop()
        depth[k] = len(holders)
        parent[k] = holders[-1] if holders else -1
        holders.append(k)
        # stages begun earlier that end inside k cross it (began before, ended inside)
        j = bisect_right(ends, (s, m))
        while j < len(ends) and ends[j][0] < e:
            if first[ends[j][1]] < s:
                crosses[k] = crosses[ends[j][1]] = True
            j += 1
        insort(ends, (e, k))
    return depth, parent, crosses

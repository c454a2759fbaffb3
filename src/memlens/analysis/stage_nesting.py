"""One tree of stages from two families: the annotated ones (record_function ranges,
nested by time: stage_pairing) and the inferred ones (steps and their phases, read from
the trace: inferred_steps).

The two are nested by the events they hold (first_event..last_event; an empty stage sits
at its first_event): a stage that holds another whole is its ancestor, so an annotated
`Optimizer.step` lying inside step#1's optimizer phase is that phase's child, and an
annotated range holding several inferred steps is their parent. Where both hold exactly
the same events the inferred one is outside: it was read from the events, the annotated
range was recorded inside them. An empty stage (an annotation with no event, such as
`Optimizer.zero_grad` before a step's first allocation) at the first event of an inferred
stage ran before it: it is not held by that stage but by what holds both, and comes right
before it (a zero_grad at a step's first event is the step's sibling, not the child of its
inferred forward). Annotated stages keep their own nesting among themselves
(by time, which events cannot always tell apart), inferred stages theirs (a phase in its
step). A stage's parent is the innermost of the two candidates (its annotated or inferred
parent, and the innermost stage of the other family holding it); an annotated stage that
overlaps an inferred one without either holding the other is `crosses`, like two
crossing annotated ranges.

Rows come out in pre-order (each stage right before what it holds; siblings by first
event, an inferred one before an annotated one starting with it, otherwise in their
own order; an empty stage before both), with index, parent, depth and occurrence
renumbered. Cost: a binary search
per annotated stage and a scan of the annotated stages per inferred stage: annotations
that mark no steps are few (PyTorch's own optimizer and compile ranges).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

# positions in a stage row (stages._INTERVAL_KEYS)
Row = list[Any]


def nest(annotated: list[Row], inferred: list[Row], col: dict[str, int]) -> list[Row]:
    """`annotated` in their order with parents among themselves; `inferred` in their order
    (a step before its phases) with parents among themselves, their indexes and parents
    counted from 0 within `inferred`. Returns both as one tree (the module docstring)."""
    m = len(annotated)
    rows = annotated + inferred
    lo = [int(r[col["first_event"]]) for r in rows]
    hi = [int(r[col["last_event"]]) for r in rows]
    own_parent: list[int] = [
        -1 if r[col["parent"]] is None else int(r[col["parent"]]) for r in rows
    ]
    own_parent[m:] = [-1 if p < 0 else p + m for p in own_parent[m:]]
    steps = [i for i in range(m, len(rows)) if own_parent[i] < 0]
    phases = [i for i in range(m, len(rows)) if own_parent[i] >= 0]

    step_starts = [lo[s] for s in steps]
    phases_of: dict[int, list[int]] = {}
    for p in phases:
        phases_of.setdefault(own_parent[p], []).append(p)

    def holder(group: list[int], starts: list[int], a: int) -> int:
        """The stage of `group` (disjoint, in order) holding a's events, -1 if none. An
        empty stage is held only by a stage that has begun before it: one at a stage's
        first event ran before that stage's first allocation (the module docstring)."""
        empty = hi[a] < lo[a]  # it lies between events lo[a] - 1 and lo[a]: both inside
        k = bisect_right(starts, lo[a] - 1 if empty else lo[a]) - 1
        return group[k] if k >= 0 and max(hi[a], lo[a]) <= hi[group[k]] else -1

    def inferred_holder(a: int) -> int:
        step = holder(steps, step_starts, a)
        if step < 0:
            return -1
        group = phases_of.get(step, [])
        phase = holder(group, [lo[p] for p in group], a)
        return phase if phase >= 0 else step

    def strictly_holds(a: int, i: int) -> bool:
        return lo[a] <= lo[i] and hi[i] <= hi[a] and (lo[a], hi[a]) != (lo[i], hi[i])

    def inside(a: int, x: int) -> bool:
        """Is annotated `a` inside inferred `x` (held by it or by one of its phases)?"""
        return h[a] >= 0 and (h[a] == x or own_parent[h[a]] == x)

    h = [inferred_holder(a) for a in range(m)]
    parent = own_parent[:]
    for a in range(m):
        p = own_parent[a]
        # the annotated parent, unless it is not inside the inferred stage holding a
        if h[a] >= 0 and (p < 0 or not inside(p, h[a])):
            parent[a] = h[a]
    for i in range(m, len(rows)):
        holders = [a for a in range(m) if strictly_holds(a, i)]
        if not holders:
            continue
        g = max(holders, key=lambda a: (rows[a][col["depth"]], a))  # the innermost
        if own_parent[i] < 0 or h[g] == own_parent[i]:
            parent[i] = g
    crosses = [bool(r[col["crosses"]]) for r in rows]
    for a in range(m):
        for i in _candidates(a, steps, phases, lo, hi):
            overlap = lo[a] <= hi[i] and lo[i] <= hi[a] and hi[a] >= lo[a] and hi[i] >= lo[i]
            if overlap and not strictly_holds(a, i) and not _holds(i, a, lo, hi):
                crosses[a] = crosses[i] = True
    return _preorder(rows, parent, crosses, lo, m, col)


def _holds(i: int, a: int, lo: list[int], hi: list[int]) -> bool:
    return lo[i] <= lo[a] and hi[a] <= hi[i]


def _candidates(
    a: int, steps: list[int], phases: list[int], lo: list[int], hi: list[int]
) -> set[int]:
    """Inferred stages holding one end of a's events: the only ones a can cross (of two
    crossing ranges, one holds exactly one end of the other)."""
    out: set[int] = set()
    for group in (steps, phases):
        starts = [lo[g] for g in group]
        for e in (lo[a], hi[a]):
            k = bisect_right(starts, e) - 1
            if k >= 0 and e <= hi[group[k]]:
                out.add(group[k])
    return out


def _preorder(
    rows: list[Row],
    parent: list[int],
    crosses: list[bool],
    lo: list[int],
    m: int,
    col: dict[str, int],
) -> list[Row]:
    children: dict[int, list[int]] = {}
    for k, p in enumerate(parent):
        children.setdefault(p, []).append(k)
    order: list[int] = []
    depth = [0] * len(rows)
    hi = [int(r[col["last_event"]]) for r in rows]

    def place(k: int) -> tuple[int, int, int]:
        """Siblings' order: by first event; at one event an empty stage, then an inferred
        one, then an annotated one."""
        return (lo[k], 0 if hi[k] < lo[k] else 2 if k < m else 1, k)

    stack = [(k, 0) for k in reversed(sorted(children.get(-1, []), key=place))]
    while stack:
        k, d = stack.pop()
        order.append(k)
        depth[k] = d
        kids = sorted(children.get(k, []), key=place)
        stack.extend((c, d + 1) for c in reversed(kids))
    new_index = {k: n for n, k in enumerate(order)}
    seen: dict[str, int] = {}
    out = []
    for n, k in enumerate(order):
        r = list(rows[k])
        r[col["index"]] = n
        r[col["parent"]] = None if parent[k] < 0 else new_index[parent[k]]
        r[col["depth"]] = depth[k]
        r[col["crosses"]] = crosses[k]
        name = r[col["name"]]
        r[col["occurrence"]] = seen.get(name, 0)
        seen[name] = r[col["occurrence"]] + 1
        out.append(r)
    return out

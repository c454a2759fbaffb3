"""A model of a peak against the swept arguments: constant + linear + quadratic terms in
each numeric argument (no cross terms), least squares over the points that ran."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


def numeric(value: str) -> float | None:
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Fit:
    """peak = constant + sum over args of (linear * x + quadratic * x^2)."""

    args: tuple[str, ...]
    constant: float
    linear: tuple[float, ...]
    quadratic: tuple[float, ...]
    ranges: tuple[tuple[float, float], ...]  # the fitted points' (min, max) of each arg
    max_residual: float  # bytes, over the fitted points
    points: int

    def predict(self, values: Mapping[str, float]) -> tuple[float, bool]:
        """(predicted bytes, extrapolated: some value outside the fitted range)."""
        total, outside = self.constant, False
        for i, arg in enumerate(self.args):
            x = values[arg]
            total += self.linear[i] * x + self.quadratic[i] * x * x
            lo, hi = self.ranges[i]
            outside |= not lo <= x <= hi
        return total, outside

    def largest_below(self, limit: float, integer: bool) -> float | None:
        """One argument: the largest value from the fitted minimum up whose prediction is
        at most `limit`, the model taken to keep growing past the points; None when the
        prediction never exceeds `limit` (below 2^40) or exceeds it already at the minimum."""
        (arg,) = self.args
        lo = self.ranges[0][0]

        def over(x: float) -> bool:
            return self.predict({arg: x})[0] > limit

        if over(lo):
            return None
        hi = max(lo, 1.0) * 2
        while not over(hi):
            if hi > 2**40:
                return None
            hi *= 2
        a, b = lo, hi  # over(a) false, over(b) true
        if integer:
            good, bad = math.floor(a), math.ceil(b)
            while bad - good > 1:
                mid = (good + bad) // 2
                good, bad = (good, mid) if over(mid) else (mid, bad)
            return float(good)
        for _ in range(200):
            half = (a + b) / 2
            a, b = (a, half) if over(half) else (half, b)
        return a


def fit(args: Sequence[str], xs: Sequence[Mapping[str, float]], ys: Sequence[int]) -> Fit | None:
    """Least squares over the points (None with no point). An argument with 2 distinct
    values gets no quadratic term and one with 1 no linear term: the points could not
    tell them apart."""
    if not xs:
        return None
    columns = [np.ones(len(xs))]
    kinds: list[tuple[int, int]] = []  # (arg index, power)
    for i, arg in enumerate(args):
        x = np.array([p[arg] for p in xs], dtype=np.float64)
        distinct = len(np.unique(x))
        for power in (1, 2):
            if distinct > power:
                columns.append(x**power)
                kinds.append((i, power))
    design = np.column_stack(columns)
    y = np.asarray(ys, dtype=np.float64)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    linear, quadratic = [0.0] * len(args), [0.0] * len(args)
    for (i, power), c in zip(kinds, coef[1:], strict=True):
        (linear if power == 1 else quadratic)[i] = float(c)
    ranges = tuple((min(p[a] for p in xs), max(p[a] for p in xs)) for a in args)
    residual = float(np.max(np.abs(design @ coef - y)))
    return Fit(
        tuple(args), float(coef[0]), tuple(linear), tuple(quadratic), ranges, residual, len(xs)
    )

"""Each allocation's size as an exact polynomial of a swept value.

Aligned request logs (simulation/request_log.py: the same requests in the same order at
several values of one swept argument) differ only in their sizes. Through k points, each
allocation's size is the unique polynomial of degree < k (Newton's divided differences in
exact fractions); the model holds at another value when every size it gives there is a
whole number of bytes, and it is trusted only after a further simulated point equals it to
the byte (planning/interpolate.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from memlens.simulation.request_log import RequestLog


@dataclass(frozen=True)
class SizeModel:
    """The sizes of the mallocs of aligned logs at `xs`: per distinct tuple of sizes
    (`columns` maps each malloc to one), Newton's coefficients over `xs`."""

    xs: tuple[int, ...]
    coefficients: tuple[tuple[Fraction, ...], ...]
    columns: np.ndarray  # int64: each malloc's row of `coefficients`

    @classmethod
    def fit(cls, xs: Sequence[int], logs: Sequence[RequestLog]) -> SizeModel:
        sizes = np.stack([log.values[log.mallocs] for log in logs])  # points x mallocs
        unique, columns = np.unique(sizes, axis=1, return_inverse=True)
        coefficients = tuple(
            _newton(xs, [int(v) for v in unique[:, j]]) for j in range(unique.shape[1])
        )
        return cls(tuple(xs), coefficients, columns.reshape(-1).astype(np.int64))

    def sizes_at(self, x: int) -> np.ndarray | None:
        """Every malloc's size at `x`, or None when one is not a whole, non-negative
        number of bytes (the sizes are not this polynomial there)."""
        values = []
        for coeffs in self.coefficients:
            v = _evaluate(self.xs, coeffs, x)
            if v.denominator != 1 or v < 0:
                return None
            values.append(int(v))
        sizes: np.ndarray = np.asarray(values, dtype=np.int64)[self.columns]
        return sizes


def _newton(xs: Sequence[int], ys: Sequence[int]) -> tuple[Fraction, ...]:
    """Newton's divided differences: f[x0], f[x0,x1], ..., exact."""
    table = [Fraction(y) for y in ys]
    out = [table[0]]
    for level in range(1, len(xs)):
        table = [(table[i + 1] - table[i]) / (xs[i + level] - xs[i]) for i in range(len(table) - 1)]
        out.append(table[0])
    return tuple(out)


def _evaluate(xs: Sequence[int], coeffs: Sequence[Fraction], x: int) -> Fraction:
    """The Newton form at x (Horner's scheme)."""
    v = coeffs[-1]
    for k in range(len(coeffs) - 2, -1, -1):
        v = v * (x - xs[k]) + coeffs[k]
    return v

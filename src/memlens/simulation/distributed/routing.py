"""The routing assumption of a simulated mixture of experts (`--routing`), without torch.

Expert-parallel code exchanges how many tokens each rank sends to every expert before it
moves the tokens (torchtitan's token dispatcher, DeepSeek-style `all_to_all_single` of
counts then of tokens). Those counts come from the router's top-k choices, i.e. from
tensor values, which a simulation does not have. The user states them instead:

- `uniform`: the N = T x K choices of T tokens (K experts each) spread evenly over the E
  experts: expert e gets N // E, plus one for the first N % E experts.
- `capacity:F` (F >= 1): the most skewed routing a capacity factor F allows: every
  expert takes up to ceil(F x N / E) choices (and at most T: a token picks an expert
  once), filled in expert order 0, 1, ... until the N choices are placed.
- `worst`: every token picks experts 0..K-1 (all of them on expert-parallel rank 0 when
  K <= its local experts): `capacity:F` with the cap at T.
- `histogram FILE`: expert e gets the share w_e / sum(w) of the N choices (JSON: a list
  of numbers or {"fractions": [...]}; CSV: one row per expert, its last column the
  weight, a header row allowed), rounded by largest remainder so the counts sum to N,
  each capped at T with the excess passed on to the next experts in order.

Every rank routes its own tokens by the same rule, so what rank s sends to rank r is
what r expects to receive from s (see values.py).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path

from memlens.errors import MemlensError

_USAGE = "--routing takes uniform, capacity:F (F >= 1), worst or histogram:FILE"


@dataclass(frozen=True)
class Routing:
    """A parsed routing assumption: `kind` (uniform, capacity, worst, histogram), `factor`
    for capacity, `weights` (one per expert) and their file for histogram."""

    kind: str = "uniform"
    factor: float = 1.0
    weights: tuple[float, ...] = ()
    source: str = ""

    def describe(self) -> str:
        """One line for the result and the snapshot: what the counts assume."""
        if self.kind == "capacity":
            return (
                f"capacity:{self.factor:g} (each expert up to {self.factor:g} x the uniform share)"
            )
        if self.kind == "worst":
            return "worst (every token to experts 0..K-1)"
        if self.kind == "histogram":
            return f"histogram {self.source} ({len(self.weights)} experts)"
        return "uniform (tokens spread evenly over the experts)"

    def counts(self, tokens: int, experts: int, k: int) -> list[int]:
        """How many of the `tokens` x `k` choices each of the `experts` gets (each at
        most `tokens`: a token picks an expert once)."""
        n = tokens * k
        if self.kind == "capacity":
            return _fill([min(tokens, math.ceil(self.factor * n / experts))] * experts, n)
        if self.kind == "worst":
            return _fill([tokens] * experts, n)
        if self.kind == "histogram" and len(self.weights) == experts:
            return _capped(_largest_remainder(self.weights, n), tokens)
        return [n // experts + (1 if e < n % experts else 0) for e in range(experts)]


def _fill(caps: list[int], n: int) -> list[int]:
    """Experts in order, each taking up to its cap of the n choices left."""
    out = []
    for cap in caps:
        take = min(cap, n)
        out.append(take)
        n -= take
    return out


def _largest_remainder(weights: tuple[float, ...], n: int) -> list[int]:
    total = sum(weights)
    exact = [w * n / total for w in weights]
    out = [math.floor(x) for x in exact]
    # the largest fractional parts get the rest (ties: the lower expert first)
    order = sorted(range(len(exact)), key=lambda e: (out[e] - exact[e], e))
    for e in order[: n - sum(out)]:
        out[e] += 1
    return out


def _capped(counts: list[int], tokens: int) -> list[int]:
    """At most `tokens` each; what is over goes to the next experts in order with room."""
    excess = sum(max(0, c - tokens) for c in counts)
    out = [min(c, tokens) for c in counts]
    for e in range(len(out)):
        room = min(tokens - out[e], excess)
        out[e] += room
        excess -= room
    return out


def parse(text: str | None) -> Routing:
    """`uniform`, `capacity:F`, `worst` or `histogram:FILE` (also `histogram FILE`);
    None is uniform. A bad value is a MemlensError naming what is accepted."""
    if text is None:
        return Routing()
    kind, _, arg = text.strip().replace(" ", ":", 1).partition(":")
    if kind in ("uniform", "worst") and not arg:
        return Routing(kind)
    if kind == "capacity":
        try:
            factor = float(arg)
        except ValueError:
            factor = math.nan
        if not math.isfinite(factor) or factor < 1:
            raise MemlensError(f"{_USAGE}: capacity factor {arg!r} is not a number >= 1")
        return Routing(kind, factor=factor)
    if kind == "histogram" and arg:
        return Routing(kind, weights=_read_weights(Path(arg)), source=arg)
    raise MemlensError(f"{_USAGE}, not {text!r}")


def _read_weights(path: Path) -> tuple[float, ...]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise MemlensError(f"--routing histogram: cannot read {path}: {exc.strerror}") from None
    try:
        weights = _json_weights(text) if path.suffix.lower() == ".json" else _csv_weights(text)
    except (ValueError, TypeError, KeyError) as exc:
        raise MemlensError(
            f"--routing histogram: {path} is not a list of weights ({exc})"
        ) from None
    if not weights or any(not math.isfinite(w) or w < 0 for w in weights) or sum(weights) <= 0:
        raise MemlensError(
            f"--routing histogram: {path} needs one weight >= 0 per expert, not all zero"
        )
    return weights


def _json_weights(text: str) -> tuple[float, ...]:
    data = json.loads(text)
    if isinstance(data, dict):
        data = data["fractions"]
    if not isinstance(data, list) or any(isinstance(x, bool) for x in data):
        raise ValueError("expected a list of numbers or {'fractions': [...]}")
    return tuple(float(x) for x in data)


def _csv_weights(text: str) -> tuple[float, ...]:
    rows = [row for row in csv.reader(text.splitlines()) if row and any(c.strip() for c in row)]
    if rows:
        try:
            float(rows[0][-1])
        except ValueError:
            rows = rows[1:]  # a header
    return tuple(float(row[-1]) for row in rows)

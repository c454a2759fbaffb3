"""`memlens plan --interpolate`: a sweep of one integer argument from a few simulations.

Most sweeps change sizes, not the sequence of operations. The ends of the range and its
middle are simulated (with unlimited memory, so every run goes to its end) and their
allocator request logs compared: when they align (same requests, same order, sizes aside),
each allocation's size is fitted as an exact polynomial of the value through the three
(planning/sizes.py) and checked against a fourth simulated point, to the byte. Every value
of the range is then the fitted sizes replayed through the allocator model at the card's
capacity (simulation/request_log.py), in milliseconds. Where the logs do not align (a
kernel switches at a threshold, a branch depends on the size) or the check fails, the range
is split at its middle and each half covered the same way, down to simulating every value.

find-max simulates the answer and the next value anyway, to confirm it: `propose` fits
the three without the fourth, keeping the segment unverified, and `settle` checks it
against the simulated logs that fall inside it (the confirming ones), simulating its own
check point only where none does. A segment must give every simulated log inside it to
the byte, whichever way it was covered; one that does not is split and fitted again.

A simulated value's figures are its own log replayed at the capacity: the same figures,
to the byte, as a simulation with that capacity (the allocator model is the simulation's),
as long as the script does not ask torch how much memory is free and act on it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from memlens.errors import MemlensError
from memlens.planning.request import PointRequest
from memlens.planning.runner import Runner
from memlens.planning.sizes import SizeModel
from memlens.planning.sweep import PointSpec
from memlens.planning.worker import PointFigures
from memlens.simulation.request_log import Replayed, RequestLog, replay_log

# The memory a log is recorded with: far beyond any card, so no run stops at an OOM
# (each value's fit on the card is decided by the replay at its capacity).
UNLIMITED = 2**60


@dataclass(frozen=True, eq=False)  # one segment is itself (its model holds arrays)
class Segment:
    """Values in [lo, hi] whose sizes `model` gives, the requests being `template`'s."""

    lo: int
    hi: int
    model: SizeModel
    template: RequestLog
    values: tuple[int, ...]  # the values it covers (to split it, when rejected)
    verified: bool = True  # checked against a simulated log beyond the three fitted


class Misfit(Exception):
    """An unverified segment's sizes are not whole bytes at a value: its fit is wrong
    there (the caller rejects it: Interpolator.reject)."""

    def __init__(self, segment: Segment) -> None:
        super().__init__(f"the fit over [{segment.lo}, {segment.hi}] is not integral")
        self.segment = segment


@dataclass(frozen=True)
class Estimate:
    """One value's figures at the capacity, and where they come from: `simulated` (its
    own log) or `interpolated` (fitted sizes between simulated values)."""

    value: int
    replayed: Replayed
    source: str


class Interpolator:
    """Covers sorted integer values with simulated logs and verified size models, then
    gives any covered value's figures. `spec_of(value)` is the point at a value;
    `simulations` counts the logs simulated here."""

    def __init__(
        self,
        runner: Runner,
        base: PointRequest,
        spec_of: Callable[[int], PointSpec],
        capacity: int | None,
    ) -> None:
        config = replace(base.config, device_memory=UNLIMITED)
        self.runner = runner
        self.base = replace(base, config=config, requests=True, sites=False)
        self.spec_of = spec_of
        self.capacity = capacity
        self.settings = base.config.allocator_settings()
        self.logs: dict[int, RequestLog] = {}
        self.segments: list[Segment] = []
        self.simulations = 0
        self.cached: set[int] = set()  # values whose log came from the cache
        self._memo: dict[int, Estimate] = {}

    def simulate(self, values: Sequence[int]) -> None:
        """The logs at `values` not simulated yet, in one batch on the runner's pool."""
        todo = [v for v in dict.fromkeys(values) if v not in self.logs]
        if not todo:
            return
        specs = [self.spec_of(v) for v in todo]
        labels = [f"{s.label} (for interpolation)" for s in specs]
        done = self.runner.run([s.request(self.base) for s in specs], labels)
        for v, s, (figures, cached) in zip(todo, specs, done, strict=True):
            self.simulations += not cached
            self._memo.pop(v, None)  # interpolated before: now its own log's figures
            if cached:
                self.cached.add(v)
            self.logs[v] = _log(s, figures)

    def cover(self, values: Sequence[int]) -> None:
        """Simulate and fit until every one of `values` (sorted, distinct) is simulated
        or inside a verified segment."""
        if values:
            self._cover(list(values))

    def _cover(self, vals: list[int]) -> None:
        inner = vals[1:-1]
        if len(inner) <= 2:  # as cheap to simulate them as to fit and check
            self.simulate(vals)
            return
        m = len(vals) // 2
        c = m // 2  # between the low end and the middle: 0 < c < m
        lo, mid, hi, check = vals[0], vals[m], vals[-1], vals[c]
        self.simulate([lo, mid, hi, check])  # one batch: they run in parallel
        model = self._fit([lo, mid, hi])
        if model is not None and self._holds(model, lo, hi):
            self.segments.append(Segment(lo, hi, model, self.logs[lo], tuple(vals)))
            return
        self._cover(vals[: m + 1])
        self._cover(vals[m:])

    def propose(self, values: Sequence[int]) -> None:
        """As `cover`, without the check point: where the three logs align, the segment
        is kept unverified until `settle` checks it (find-max's confirming simulations
        are its check points)."""
        if values:
            self._propose(list(values))

    def _propose(self, vals: list[int]) -> None:
        if len(vals) <= 4:  # as in _cover: simulate them
            self.simulate(vals)
            return
        m = len(vals) // 2
        lo, mid, hi = vals[0], vals[m], vals[-1]
        self.simulate([lo, mid, hi])
        model = self._fit([lo, mid, hi])
        if model is None:
            self._propose(vals[: m + 1])
            self._propose(vals[m:])
            return
        self.segments.append(Segment(lo, hi, model, self.logs[lo], tuple(vals), False))

    def check_points(self, coming: Sequence[int]) -> list[int]:
        """A value to simulate for each unverified segment that neither a simulated log
        nor one of `coming` (about to be simulated) checks: its own check point, as
        `_cover` picks it."""
        known = set(self.logs) | set(coming)
        out = []
        for s in self.segments:
            if not s.verified and not self._beyond_fit(s.model, s.lo, s.hi, known):
                out.append(s.values[len(s.values) // 2 // 2])
        return out

    def settle(self) -> bool:
        """Check every segment against the simulated logs inside it beyond its three
        (check_points says which to simulate first; a verified one too, as logs simulated
        since may fall inside it): verified where it gives every one to the byte, else
        rejected (split and proposed again). True when none was rejected."""
        settled = True
        for s in list(self.segments):
            if self._holds(s.model, s.lo, s.hi):
                self.segments[self.segments.index(s)] = replace(s, verified=True)
            else:
                self.reject(s)
                settled = False
        return settled

    def reject(self, segment: Segment) -> None:
        """Drop a segment whose fit is wrong somewhere: its halves are proposed again
        (with the logs simulated since, which they must also give)."""
        self.segments.remove(segment)
        self._memo.clear()  # figures read from it are void
        m = len(segment.values) // 2
        self.runner.say(
            f"interpolation: the fit over [{segment.lo}, {segment.hi}] does not hold; splitting it"
        )
        self._propose(list(segment.values[: m + 1]))
        self._propose(list(segment.values[m:]))

    def _fit(self, xs: list[int]) -> SizeModel | None:
        logs = [self.logs[x] for x in xs]
        if not all(logs[0].aligns_with(other) for other in logs[1:]):
            return None
        return SizeModel.fit(xs, logs)

    def _beyond_fit(self, model: SizeModel, lo: int, hi: int, known: set[int]) -> list[int]:
        """The values of `known` in [lo, hi] other than the three `model` was fitted through."""
        return sorted(x for x in known if lo <= x <= hi and x not in model.xs)

    def _holds(self, model: SizeModel, lo: int, hi: int) -> bool:
        """The model gives every simulated log in [lo, hi] to the byte, and there is at
        least one beyond the three it was fitted through."""
        extra = self._beyond_fit(model, lo, hi, set(self.logs))
        return bool(extra) and all(self._predicts(model, lo, x) for x in extra)

    def _predicts(self, model: SizeModel, lo: int, x: int) -> bool:
        """The model gives the simulated log at `x`, every size to the byte."""
        actual = self.logs[x]
        if not self.logs[lo].aligns_with(actual):
            return False
        sizes = model.sizes_at(x)
        return sizes is not None and bool((sizes == actual.values[actual.mallocs]).all())

    def at(self, value: int) -> Estimate:
        """The figures at a covered value (replayed once, then remembered)."""
        if value not in self._memo:
            log, source = self._log_at(value)
            self._memo[value] = Estimate(value, self._replay(log), source)
        return self._memo[value]

    def needs(self, value: int) -> int:
        """Peak reserved at a covered value with unlimited memory: what the run needs,
        where at the capacity its peak stops at the OOM."""
        return replay_log(self._log_at(value)[0], None, self.settings).peak_reserved

    def _log_at(self, value: int) -> tuple[RequestLog, str]:
        if value in self.logs:
            return self.logs[value], "simulated"
        segment = next((s for s in self.segments if s.lo <= value <= s.hi), None)
        if segment is None:
            raise MemlensError(f"internal: {value} is not covered by the interpolation")
        sizes = segment.model.sizes_at(value)
        if sizes is None and not segment.verified:
            raise Misfit(segment)
        if sizes is None:  # the fit is not integral here: simulate it instead
            self.simulate([value])
            return self.logs[value], "simulated"
        return segment.template.with_sizes(sizes), "interpolated"

    def looked_at(self) -> list[Estimate]:
        """Every value's figures given so far, by value."""
        return [self._memo[v] for v in sorted(self._memo)]

    def _replay(self, log: RequestLog) -> Replayed:
        return replay_log(log, self.capacity, self.settings)


def _log(spec: PointSpec, figures: PointFigures) -> RequestLog:
    if figures["error"] is not None:
        raise MemlensError(f"{' '.join(spec.argv)}: {figures['error']}")
    assert figures["requests"] is not None  # asked for (Interpolator.base)
    return RequestLog.from_json(figures["requests"])


def figures_of(estimate: Estimate) -> PointFigures:
    """An estimate as a point's figures (the rows plan prints)."""
    r = estimate.replayed
    return {
        "peak_active_bytes": r.peak_active,
        "peak_reserved_bytes": r.peak_reserved,
        "oom": r.oom,
        "error": None,
        "applied": [],
        "sites": [],
        "requests": None,
    }

"""Across ranks: robust z-scores per figure, outliers, groups, imbalance per stage.

Robust z-score of a rank on a figure: (value - median) / scale, with scale = 1.4826 x
the median absolute deviation (MAD; the factor makes it a standard deviation for normal
data). Median and MAD ignore a few extreme ranks, so one bad rank cannot hide itself by
inflating the spread, as it would with a mean and standard deviation.

The scale has a floor: 1% of the figure's median, and 0.2% of the median peak. Ranks of
one job are often identical to the byte (MAD 0), and then any difference, however small,
would be infinitely far; with the floor, a rank must be a few percent off (3.5 x 1% at the
default threshold) before it is an outlier, and a figure of a few kilobytes on a rank of
gigabytes never is.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from memlens.fleet.record import RankRecord
from memlens.fleet.results import FigureStats, FlaggedFigure, Group, Outlier, StageImbalance

HEADLINE = ("peak_active_bytes", "peak_reserved_bytes", "baseline_bytes", "end_active_bytes")
MAD_TO_SIGMA = 1.4826
REL_FLOOR = 0.01  # of the figure's median
PEAK_FLOOR = 0.002  # of the median peak active bytes
DEFAULT_Z = 3.5
DEFAULT_TOLERANCE = 0.05


def figures_of(rec: RankRecord) -> dict[str, int]:
    """The figures judged across ranks: headline bytes, each stage's peak, each
    category's bytes at the peak."""
    out = {k: int(getattr(rec, k)) for k in HEADLINE}
    out.update({f"stage:{k}": v for k, v in rec.stage_peaks.items()})
    out.update({f"category:{k}": v for k, v in rec.category_bytes.items()})
    return out


def robust_stats(values: Sequence[int], peak_median: float) -> FigureStats:
    med = float(statistics.median(values))
    mad = float(statistics.median(abs(v - med) for v in values))
    scale = max(MAD_TO_SIGMA * mad, REL_FLOOR * abs(med), PEAK_FLOOR * peak_median, 1.0)
    return FigureStats(median=med, mad=mad, scale=scale, ranks=len(values))


Stats = dict[str, FigureStats]
Scores = dict[int, dict[str, float]]  # rank -> figure -> z


def fleet_stats(records: Sequence[RankRecord]) -> tuple[Stats, Scores]:
    """({figure: {"median", "mad", "scale", "ranks"}}, {rank: {figure: z}}) over the ok
    ranks (a rank without a stage is not judged on it)."""
    figs = {r.rank: figures_of(r) for r in records if r.ok}
    by_name: dict[str, list[int]] = {}
    for f in figs.values():
        for k, v in f.items():
            by_name.setdefault(k, []).append(v)
    if not figs:
        return {}, {}
    peak_median = float(statistics.median(by_name["peak_active_bytes"]))
    stats = {
        name: robust_stats(by_name[name], peak_median)
        for name in sorted(by_name, key=_figure_order)
    }
    z = {
        rank: {k: round((v - stats[k]["median"]) / stats[k]["scale"], 3) for k, v in f.items()}
        for rank, f in figs.items()
    }
    return stats, z


def _figure_order(name: str) -> tuple[int, str]:
    if name in HEADLINE:
        return (0, f"{HEADLINE.index(name):02d}")
    return (1 if name.startswith("stage:") else 2, name)


def outliers(
    records: Sequence[RankRecord],
    stats: Stats,
    z: Scores,
    threshold: float = DEFAULT_Z,
) -> list[Outlier]:
    """Ranks with |z| > threshold on any figure, the most extreme first; each with its
    flagged figures (value, median, z, change_pct), largest |z| first."""
    out: list[Outlier] = []
    for r in records:
        if not r.ok:
            continue
        figs = figures_of(r)
        flagged = [
            _flagged(k, figs[k], stats[k]["median"], zk)
            for k, zk in z[r.rank].items()
            if abs(zk) > threshold
        ]
        if flagged:
            flagged.sort(key=lambda f: (-abs(f["z"]), _figure_order(f["name"])))
            out.append(
                Outlier(
                    rank=r.rank,
                    path=r.path,
                    max_abs_z=abs(flagged[0]["z"]),
                    figures=flagged,
                    diff=None,
                )
            )
    out.sort(key=lambda o: (-o["max_abs_z"], o["rank"]))
    return out


def _flagged(name: str, value: int, median: float, z: float) -> FlaggedFigure:
    pct = round(100 * (value - median) / median, 2) if median else None
    return FlaggedFigure(name=name, value=value, median=median, z=z, change_pct=pct)


def median_rank(records: Sequence[RankRecord], z: Scores) -> int | None:
    """The most typical ok rank: smallest sum of |z| over the headline figures (the
    lowest rank on a tie). The outliers are diffed against it."""
    ok = [r.rank for r in records if r.ok]
    if not ok:
        return None
    return min(ok, key=lambda rank: (sum(abs(z[rank][k]) for k in HEADLINE), rank))


def groups(
    records: Sequence[RankRecord],
    stats: Stats,
    tolerance: float = DEFAULT_TOLERANCE,
) -> list[Group]:
    """Ranks that behave alike: the same stack-set fingerprint, and each headline figure
    within `tolerance` (a fraction of the fleet's median of that figure) of the group's
    first rank. Ranks are taken in rank order; largest group first."""
    made: list[dict[str, Any]] = []
    for r in sorted((r for r in records if r.ok), key=lambda r: r.rank):
        for g in made:
            first = g["_first"]
            if g["fingerprint"] == r.fingerprint and all(
                abs(getattr(r, k) - getattr(first, k))
                <= tolerance * max(abs(stats[k]["median"]), 1.0)
                for k in HEADLINE
            ):
                g["ranks"].append(r.rank)
                break
        else:
            made.append({"fingerprint": r.fingerprint, "ranks": [r.rank], "_first": r})
    made.sort(key=lambda g: (-len(g["ranks"]), g["ranks"][0]))
    return [
        Group(
            group=i,
            fingerprint=g["fingerprint"],
            count=len(g["ranks"]),
            ranks=g["ranks"],
            peak_active_bytes=g["_first"].peak_active_bytes,
        )
        for i, g in enumerate(made)
    ]


def stage_imbalance(records: Iterable[RankRecord]) -> list[StageImbalance]:
    """Per stage (base name): its peak over the ranks that have it: min, median, max,
    which ranks, spread and max / median (1.0 = balanced). Most imbalanced first."""
    per: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        if r.ok:
            for name, b in r.stage_peaks.items():
                per.setdefault(name, []).append((b, r.rank))
    out: list[StageImbalance] = []
    for name, vals in per.items():
        vals.sort()
        med = float(statistics.median(v for v, _ in vals))
        (lo, lo_rank), hi = vals[0], vals[-1][0]
        hi_rank = next(rank for v, rank in vals if v == hi)  # the lowest rank at the max
        out.append(
            StageImbalance(
                stage=name,
                ranks=len(vals),
                min_bytes=lo,
                min_rank=lo_rank,
                median_bytes=med,
                max_bytes=hi,
                max_rank=hi_rank,
                spread_bytes=hi - lo,
                max_over_median=round(hi / med, 4) if med else None,
            )
        )
    out.sort(key=lambda s: (-(s["max_over_median"] or 0), s["stage"]))
    return out

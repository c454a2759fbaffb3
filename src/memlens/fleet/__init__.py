"""Fleet analysis: one snapshot per rank, thousands of ranks, which differ and why.

    from memlens import fleet
    result = fleet.run("run42/")      # the JSON of `memlens fleet --json`, as a dict

(`memlens.fleet` is this package, always; the analysis is `memlens.fleet.run`.)
"""

from __future__ import annotations

from memlens.fleet.api import run, summarize_fleet
from memlens.fleet.record import RankRecord, rank_record
from memlens.fleet.results import FleetResult

__all__ = ["FleetResult", "RankRecord", "rank_record", "run", "summarize_fleet"]

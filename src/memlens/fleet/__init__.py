"""Fleet analysis: one snapshot per rank, thousands of ranks, which differ and why.

`memlens.fleet(paths, ...)` is this package called as a function (see api.fleet): the
package and the function share the name `memlens.fleet`, so the module is made callable
rather than one of the two shadowing the other depending on import order.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from memlens.fleet.api import fleet, summarize_fleet
from memlens.fleet.record import RankRecord, rank_record
from memlens.fleet.results import FleetResult


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> FleetResult:
        return fleet(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["FleetResult", "RankRecord", "fleet", "rank_record", "summarize_fleet"]

"""`memlens plan --find-max --interpolate` (issue 34): the answer in at most 5
simulations where the sizes are a polynomial of degree 2 or less in the value (3 to fit,
the answer and the next value to confirm, which are also the fit's check), equal to
simulating every value; and where the fit is wrong at the confirming values, split and
fitted again until it is exact."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from in_process import InProcess

from memlens.planning.interpolate import Interpolator, Segment
from memlens.planning.interpolated_plan import interpolated_find_max
from memlens.planning.request import PointRequest
from memlens.planning.results import PlanFindMax
from memlens.planning.sweep import Search, configure
from memlens.planning.worker import PointFigures, simulate_point
from memlens.simulation.config import SimulateConfig
from memlens.simulation.script import ScriptTarget

pytest.importorskip("torch")

MiB = 2**20
VALUES = range(1, 17)

# Sizes constant, linear and quadratic in n: one fit through 1, 9 and 16 gives them all.
QUADRATIC = """
import sys

import torch

n = int(sys.argv[sys.argv.index("--n") + 1])
w = torch.empty(3 * 2**20 + 4 * n * 1000, device="cuda", dtype=torch.uint8)
for _ in range(2):
    a = torch.empty(n * n * 2**16, device="cuda", dtype=torch.uint8)
    b = torch.empty(n * 2**21 + 512 * n, device="cuda", dtype=torch.uint8)
    del a, b
"""

# A size with a kink: n until 11, 3n - 22 from there (the allocation sequence is the same
# at every n; the sizes are not one polynomial of n).
KINK = """
import sys

import torch

n = int(sys.argv[sys.argv.index("--n") + 1])
w = torch.empty(3 * 2**20, device="cuda", dtype=torch.uint8)
for _ in range(2):
    a = torch.empty(max(n, 3 * n - 22) * 2**21, device="cuda", dtype=torch.uint8)
    b = torch.empty(n * 2**20, device="cuda", dtype=torch.uint8)
    del a, b
"""


def _base(tmp_path: Path, source: str, usable: int | None) -> PointRequest:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(source))
    config = SimulateConfig(device_memory=usable, alloc_conf="", stacks=None, cublas_workspace=0)
    return PointRequest(ScriptTarget(str(path)), config)


def _brute_force(base: PointRequest) -> dict[int, PointFigures]:
    """Every value simulated at the capacity, as plan does without --interpolate."""
    return {n: simulate_point(configure([], {"--n": str(n)}).request(base)) for n in VALUES}


def _find_max(base: PointRequest, usable: int) -> tuple[PlanFindMax, int]:
    runner = InProcess(use_cache=False)
    search = Search((), "--n", VALUES[0], VALUES[-1])
    found = interpolated_find_max(runner, base, search, 1, usable)
    return found, runner.simulated


def _agrees_with(found: PlanFindMax, want: dict[int, PointFigures], usable: int) -> None:
    """The answer, the values below it that do not fit, the margin and every probe equal
    the brute force's to the byte."""
    fits = {n: not f["oom"] for n, f in want.items()}
    best = max(n for n, ok in fits.items() if ok)
    assert found["largest_fitting"] == best
    assert found["failing"] == [n for n in VALUES if n < best and not fits[n]]
    assert found["margin_bytes"] == usable - want[best]["peak_reserved_bytes"]
    assert found["confirmed"] is True
    for p in found["probes"]:
        w = want[int(p["values"]["--n"])]
        assert (p["peak_active_bytes"], p["peak_reserved_bytes"], p["oom"]) == (
            w["peak_active_bytes"],
            w["peak_reserved_bytes"],
            w["oom"],
        ), p["values"]


def test_find_max_takes_5_simulations_when_sizes_are_quadratic_and_equals_brute_force(tmp_path):
    usable = 47 * MiB
    base = _base(tmp_path, QUADRATIC, usable)
    found, simulations = _find_max(base, usable)
    # 1, 9 and 16 fitted; 12 (the answer) and 13 (the next) confirm it and check the fit
    assert simulations == found["simulations"] == 5
    simulated = sorted(
        int(p["values"]["--n"]) for p in found["probes"] if p["source"] == "simulated"
    )
    assert simulated == [1, 9, 12, 13, 16]
    assert found["largest_fitting"] == 12
    assert found["margin_bytes"] == 49_283_072 - 48_234_496  # 1 MiB left of 47 MiB
    # 13 needs 48 MiB with unlimited memory: 1 MiB more than usable
    assert found["shortfall_bytes"] == 50_331_648 - 49_283_072
    _agrees_with(found, _brute_force(base), usable)


def test_find_max_reports_non_monotone_memory_from_interpolated_values(tmp_path):
    """Peak reserved is 22 MiB at 1..4, 20 MiB at 5 and 6 (one 20 MiB segment holds
    both buffers), then grows: with 21 MiB usable, 6 fits and 1..4 do not. 2, 3 and 4 are
    interpolated, and still equal their simulations."""
    usable = 21 * MiB
    base = _base(tmp_path, QUADRATIC, usable)
    found, simulations = _find_max(base, usable)
    assert simulations == 5  # 1, 9, 16; 6 and 7 to confirm
    assert (found["largest_fitting"], found["failing"]) == (6, [1, 2, 3, 4])
    assert found["margin_bytes"] == 22_020_096 - 20_971_520
    sources = {int(p["values"]["--n"]): p["source"] for p in found["probes"]}
    assert sources[3] == "interpolated" and sources[6] == "simulated"
    _agrees_with(found, _brute_force(base), usable)


def test_a_fit_the_confirming_simulations_contradict_is_split_and_stays_exact(tmp_path):
    """The quadratic through 1, 9 and 16 of a kinked size is not whole bytes at some
    value (rejected while scanning), and so is the one through 9, 13 and 16; the one
    through 9, 11 and 13 is integral but the confirming simulations at 14 and 15
    contradict it (rejected when settling). Each rejected range is split and fitted
    again, and the answer, with no margin left at all, is brute force's."""
    usable = 60 * MiB
    base = _base(tmp_path, KINK, usable)
    rejected: list[tuple[int, int]] = []
    reject = Interpolator.reject

    def spy(self: Interpolator, segment: Segment) -> None:
        rejected.append((segment.lo, segment.hi))
        reject(self, segment)

    mp = pytest.MonkeyPatch()
    mp.setattr(Interpolator, "reject", spy)
    try:
        found, simulations = _find_max(base, usable)
    finally:
        mp.undo()
    assert rejected == [(1, 16), (9, 16), (9, 13)]
    assert simulations == 11
    assert (found["largest_fitting"], found["margin_bytes"]) == (14, 0)  # 14 needs 60 MiB
    assert found["shortfall_bytes"] == 69_206_016 - usable  # 15 needs 66 MiB
    _agrees_with(found, _brute_force(base), usable)

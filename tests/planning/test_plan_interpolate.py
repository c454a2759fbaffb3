"""`memlens plan --interpolate` (issue 34): allocation sizes fitted between simulated
values and replayed through the allocator model, exact to the byte; a range whose
allocation sequence changes inside it is split there. The simulations run in this process
(an in-process runner) to keep the tests in seconds."""

from __future__ import annotations

import textwrap
from dataclasses import replace

import numpy as np
import pytest
from in_process import InProcess

from memlens.planning.interpolate import Interpolator
from memlens.planning.interpolated_plan import default_step, grid, interpolated_find_max
from memlens.planning.request import PointRequest
from memlens.planning.sizes import SizeModel
from memlens.planning.sweep import PointSpec, Search, configure
from memlens.planning.worker import PointFigures, simulate_point
from memlens.simulation.config import SimulateConfig
from memlens.simulation.request_log import MALLOC, RequestLog
from memlens.simulation.script import ScriptTarget

pytest.importorskip("torch")

MiB = 2**20

# Sizes linear and quadratic in n, and from n = 9 on one more buffer: the sequence of
# allocations changes inside the range.
BRANCHY = """
import sys

import torch

n = int(sys.argv[sys.argv.index("--n") + 1])
w = torch.empty(3 * 2**20 + 4 * n * 1000, device="cuda", dtype=torch.uint8)
for _ in range(2):
    a = torch.empty(n * n * 2**14, device="cuda", dtype=torch.uint8)
    b = torch.empty(n * 2**20 + 512 * n, device="cuda", dtype=torch.uint8)
    if n >= 9:
        c = torch.empty(2**21, device="cuda", dtype=torch.uint8)
        del c
    del a, b
"""


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "branchy.py"
    path.write_text(textwrap.dedent(BRANCHY))
    return path


def _base(script: object, usable: int | None) -> PointRequest:
    config = SimulateConfig(device_memory=usable, alloc_conf="", stacks=None, cublas_workspace=0)
    return PointRequest(ScriptTarget(str(script)), config)


def _spec(n: int) -> PointSpec:
    return configure([], {"--n": str(n)})


def _simulated(base: PointRequest, n: int) -> PointFigures:
    """The plan's ordinary point: simulated at the capacity, no interpolation."""
    return simulate_point(_spec(n).request(base))


def test_a_changing_sequence_splits_the_range_and_stays_exact_to_the_byte(script):
    usable = 30 * MiB  # the larger values do not fit: the replays must OOM where it does
    base = _base(script, usable)
    runner = InProcess(use_cache=False)
    interp = Interpolator(runner, base, _spec, usable)
    values = list(range(1, 17))
    interp.cover(values)
    # the sequence changes at 9: no verified segment spans it
    assert all(not (s.lo < 9 <= s.hi) or s.lo >= 9 for s in interp.segments)
    assert interp.segments, "some values must be interpolated"
    assert interp.simulations < len(values)
    got = {v: interp.at(v) for v in values}
    interpolated = [v for v in values if got[v].source == "interpolated"]
    assert interpolated
    for v in values:  # simulated at the capacity, as plan does without --interpolate
        want = _simulated(base, v)
        r = got[v].replayed
        assert (r.peak_active, r.peak_reserved, r.oom) == (
            want["peak_active_bytes"],
            want["peak_reserved_bytes"],
            want["oom"],
        ), v
    assert any(got[v].replayed.oom for v in values) and not got[1].replayed.oom


def test_sizes_fit_as_exact_integer_polynomials():
    def log(
        n: int,
    ) -> RequestLog:  # malloc n^2 * 3 / 2 (an integer for even n only), then n + 7, free both
        kinds = np.asarray([MALLOC, MALLOC, 2, 2], dtype=np.int8)
        return RequestLog(kinds, np.asarray([n * n * 3 // 2, n + 7, 0, 1]), np.zeros(4, np.int64))

    model = SizeModel.fit([2, 4, 8], [log(2), log(4), log(8)])
    at6, at100 = model.sizes_at(6), model.sizes_at(100)
    assert at6 is not None and at6.tolist() == [54, 13]
    assert at100 is not None and at100.tolist() == [15000, 107]
    assert model.sizes_at(3) is None  # 13.5 bytes: not these sizes there
    assert log(2).aligns_with(log(8))
    moved = RequestLog(log(2).kinds, np.asarray([6, 9, 1, 0]), log(2).streams)
    assert not log(2).aligns_with(moved)  # the frees free other allocations


def test_find_max_confirms_by_simulation_and_reports_margin_and_shortfall(script):
    usable = 30 * MiB
    base = _base(script, usable)
    runner = InProcess(use_cache=False)
    found = interpolated_find_max(runner, base, Search((), "--n", 1, 16), 1, usable)
    fits = {v: not _simulated(base, v)["oom"] for v in range(1, 17)}
    best = max(v for v, ok in fits.items() if ok)
    assert found["largest_fitting"] == best
    assert found["shortfall_bytes"] is not None
    assert found["confirmed"] is True
    assert found["failing"] == [v for v in range(1, best) if not fits[v]]
    at, nxt = _simulated(base, best), _simulated(base, best + 1)
    assert found["margin_bytes"] == usable - at["peak_reserved_bytes"]
    unlimited = _base(script, None)  # what best + 1 needs: its run with no capacity
    assert (
        found["shortfall_bytes"] == _simulated(unlimited, best + 1)["peak_reserved_bytes"] - usable
    )
    assert found["shortfall_bytes"] > 0 and nxt["oom"]
    sources = {p["source"] for p in found["probes"]}
    assert sources == {"simulated", "interpolated"}


def test_the_default_step_leaves_about_64_values():
    assert default_step(1, 32) == 1
    assert default_step(128, 2048) == 20
    assert default_step(1, 100000) == 1000
    assert grid(128, 200, 20) == [128, 148, 168, 188, 200]


def test_what_ifs_are_interpolated_and_equal_plain_simulation_to_the_byte(script):
    """--interpolate --what-if: each knob's sweep from its own few simulations, every row
    equal to the knob's point simulated alone; the table point simulated (call sites)."""
    from memlens.planning.plan import Interpolation, Setup, _plan
    from memlens.planning.sweep import Sweep
    from memlens.planning.whatif import knob_request

    usable = 30 * MiB
    base = replace(_base(script, usable), sites=True)  # as plan asks with --what-if
    runner = InProcess(use_cache=False)
    values = tuple(str(v) for v in range(1, 17))
    knobs = ["expandable_segments", "max_split_size_mb:4"]
    setup = Setup(None, usable, 0)
    got = _plan(
        runner, base, [], [Sweep("--n", values)], setup, (), None, knobs, None, Interpolation(True)
    )
    assert len(got["what_ifs"]) == 2
    sources = set()
    for entry in got["what_ifs"]:
        knob_base = knob_request(base, entry["setting"])[0]
        for p, v in zip(entry["points"], values, strict=True):
            want = simulate_point(_spec(int(v)).request(knob_base))
            assert (p["peak_active_bytes"], p["peak_reserved_bytes"], p["oom"]) == (
                want["peak_active_bytes"],
                want["peak_reserved_bytes"],
                want["oom"],
            ), (entry["setting"], v)
            sources.add(p["source"])
    assert sources == {"simulated", "interpolated"}
    # the baseline's rows too, and fewer simulations than the 48 points of plain plan
    for p, v in zip(got["points"], values, strict=True):
        want = _simulated(base, int(v))
        assert (p["peak_active_bytes"], p["peak_reserved_bytes"]) == (
            want["peak_active_bytes"],
            want["peak_reserved_bytes"],
        ), v
    assert got["simulations"] < 3 * len(values)
    table = got["knob_table"]
    assert table is not None and {r["setting"] for r in table["rows"]} == {
        "expandable_segments:True",
        "max_split_size_mb:4",
    }
    i = table["point"]
    assert got["points"][i]["source"] == "simulated"
    assert all(e["points"][i]["source"] == "simulated" for e in got["what_ifs"])

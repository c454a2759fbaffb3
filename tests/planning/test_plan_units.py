"""memlens plan's parts that need no simulation: sweeps, argv edits, the fit (issue 23)."""

from __future__ import annotations

from typing import Any

import pytest

from memlens.errors import MemlensError
from memlens.planning import point_cache
from memlens.planning.fit import fit
from memlens.planning.plan import Setup
from memlens.planning.point_cache import cache_key, cached, store
from memlens.planning.request import PointRequest
from memlens.planning.sweep import Sweep, grid, with_value
from memlens.planning.whatif import check_knob, knob_request, split_knobs, what_if_conf
from memlens.planning.worker import PointFigures
from memlens.simulation.config import SimulateConfig
from memlens.simulation.script import ScriptTarget

MiB = 2**20


def test_sweep_parses_and_rejects_what_is_not_arg_equals_values():
    assert Sweep.parse("--batch-size=1, 2,4") == Sweep("--batch-size", ("1", "2", "4"))
    for bad in ("--batch-size", "=1,2", "--batch-size=1,,2"):
        with pytest.raises(MemlensError, match="expected 'ARG=V1,V2,...'"):
            Sweep.parse(bad)


def test_with_value_replaces_either_spelling_or_appends():
    assert with_value(["--lr", "3", "--bs", "8"], "--bs", "16") == ["--lr", "3", "--bs", "16"]
    assert with_value(["--bs=8", "x"], "--bs", "16") == ["--bs=16", "x"]
    assert with_value(["x"], "--bs", "16") == ["x", "--bs", "16"]


def test_grid_is_the_cartesian_product_in_order():
    sweeps = [Sweep("--b", ("1", "2")), Sweep("--s", ("8", "16", "32"))]
    points = grid(["--s", "4"], sweeps)
    assert [p.values for p in points] == [
        {"--b": b, "--s": s} for b in ("1", "2") for s in ("8", "16", "32")
    ]
    assert points[-1].argv == ["--s", "32", "--b", "2"] and points[-1].env == {}
    with pytest.raises(MemlensError, match="only once"):
        grid([], [Sweep("--b", ("1",)), Sweep("--b", ("2",))])


def test_an_env_sweep_sets_variables_and_keys_the_options():
    sweeps = [Sweep("--b", ("1", "2")), Sweep.parse("BATCH=8,16", env=True)]
    points = grid(["x"], sweeps)
    assert [(p.argv, p.env, p.label) for p in points[:2]] == [
        (["x", "--b", "1"], {"BATCH": "8"}, "--b=1 BATCH=8"),
        (["x", "--b", "1"], {"BATCH": "16"}, "--b=1 BATCH=16"),
    ]
    base = PointRequest(ScriptTarget("t.py"), SimulateConfig(gpu="t4"))
    assert points[0].request(base) == PointRequest(
        ScriptTarget("t.py", ("x", "--b", "1")), SimulateConfig(gpu="t4"), env={"BATCH": "8"}
    )
    assert grid([], [Sweep("--b", ("1",))])[0].request(base).env == {}
    with pytest.raises(MemlensError, match="expected 'NAME=V1,V2,...'"):
        Sweep.parse("BATCH", env=True)


def test_what_if_combinations_split_outside_brackets():
    assert split_knobs(" autocast=BF16 , checkpoint=Block{1,2},expandable_segments") == [
        "autocast=bf16",
        "checkpoint=Block{1,2}",
        "expandable_segments:True",
    ]
    assert split_knobs("roundup_power2_divisions:[256:1,512:2]") == [
        "roundup_power2_divisions:[256:1,512:2]"
    ]
    base = PointRequest(ScriptTarget("t.py"), SimulateConfig(alloc_conf="max_split_size_mb:64"))
    request, setting, kind = knob_request(base, "expandable_segments,checkpoint=Block")
    assert setting == "expandable_segments:True,checkpoint=Block" and kind == "mixed"
    assert request == PointRequest(
        ScriptTarget("t.py"),
        SimulateConfig(alloc_conf="max_split_size_mb:64,expandable_segments:True"),
        knobs=("checkpoint=Block",),
    )
    for bad, message in (("autocast=bf16,autocast=fp16", "given once"), ("a:1,,", "empty knob")):
        with pytest.raises(MemlensError, match=message):
            check_knob(bad)


def test_fit_recovers_the_terms_and_predicts_a_held_out_point():
    # 3 MiB + 5 MiB x b + 7 MiB x b^2 + 11 MiB x s, exactly (s is linear: no s^2 term)
    def peak(b: int, s: int) -> int:
        return (3 + 5 * b + 7 * b * b + 11 * s) * MiB

    xs = [{"b": b, "s": s} for b in (1, 2, 4) for s in (1, 2, 3)]
    model = fit(["b", "s"], xs, [peak(x["b"], x["s"]) for x in xs])
    assert model is not None and model.max_residual < 1
    assert model.predict({"b": 3, "s": 2})[0] == pytest.approx(peak(3, 2), abs=1)
    assert model.predict({"b": 3, "s": 2})[1] is False
    predicted, extrapolated = model.predict({"b": 8, "s": 2})
    assert predicted == pytest.approx(peak(8, 2), abs=1) and extrapolated is True
    assert model.quadratic[1] == pytest.approx(0, abs=1e-3)


def test_fit_drops_terms_the_points_cannot_tell_apart():
    model = fit(["b"], [{"b": 1}, {"b": 3}], [10, 30])
    assert model is not None and model.quadratic == (0.0,)
    assert model.constant == pytest.approx(0, abs=1e-9) and model.linear[0] == pytest.approx(10)


def test_largest_below_bisects_the_model():
    # 16 MiB (1 + b + b^2) <= 14.5 GiB: 1 + b + b^2 <= 928, b = 29 (871), 30 gives 931
    model = fit(
        ["b"], [{"b": b} for b in (1, 2, 4)], [16 * MiB * (1 + b + b * b) for b in (1, 2, 4)]
    )
    assert model is not None
    assert model.largest_below(14848 * MiB, integer=True) == 29
    assert model.largest_below(16 * MiB * 2, integer=True) is None  # not even b = 1
    flat = fit(["b"], [{"b": 1}], [5])
    assert flat is not None and flat.largest_below(10, integer=True) is None  # never exceeds


def test_setup_usable_memory_and_what_if_settings():
    setup = Setup.of("t4", None, None)
    assert (setup.capacity, setup.reserve, setup.usable) == (15360 * MiB, 512 * MiB, 14848 * MiB)
    assert Setup.of(None, "1GiB", "24MiB").usable == 1000 * MiB
    assert Setup.of(None, None, None).usable is None
    with pytest.raises(MemlensError, match="leaves nothing"):
        Setup.of(None, "1GiB", "1GiB")
    assert what_if_conf("max_split_size_mb:64", "expandable_segments") == (
        "max_split_size_mb:64,expandable_segments:True"
    )
    with pytest.raises(MemlensError, match="not modelled"):
        what_if_conf("", "garbage_collection_threshold:0.6")
    with pytest.raises(MemlensError, match="KEY:VALUE"):
        what_if_conf("", "fast")


def _key(script: object, args: list[str], gpu: str = "t4", **more: Any) -> str:
    request = PointRequest(ScriptTarget(str(script), tuple(args)), SimulateConfig(gpu=gpu), **more)
    return cache_key(request)


def test_cache_key_is_the_scripts_bytes_args_and_options(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMLENS_CACHE_DIR", str(tmp_path / "cache"))
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("x = 1\n")
    key = _key(a, ["--bs", "1"])
    assert _key(b, ["--bs", "1"]) == key  # a copy: same bytes
    assert _key(b, ["--bs", "1"], sites=True) == key  # call sites are not part of it
    assert _key(a, ["--bs", "2"]) != key
    assert _key(a, ["--bs", "1"], gpu="a100") != key
    assert _key(a, ["--bs", "1"], knobs=("autocast=bf16",)) != key
    assert _key(a, ["--bs", "1"], env={"BATCH": "2"}) != key
    b.write_text("x = 2\n")
    assert _key(b, ["--bs", "1"]) != key
    assert cached(key) is None
    figures: PointFigures = {"peak_active_bytes": 1, "peak_reserved_bytes": 2, "oom": False,
                             "error": None, "applied": [], "sites": [], "requests": None}  # fmt: skip
    store(key, figures)
    assert cached(key) == figures
    (tmp_path / "cache" / "plan" / f"{key}.json").write_text('{"peak_active_bytes": 1}')
    assert cached(key) is None  # a damaged entry is a miss


def test_cache_key_follows_the_simulators_code_not_the_package_version(tmp_path, monkeypatch):
    """A change in the simulator's sources (or torch's version) misses: figures computed
    by an older allocator model are not served (issue 34)."""
    monkeypatch.setenv("MEMLENS_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "a.py"
    script.write_text("x = 1\n")
    key = _key(script, [])
    point_cache.simulator_identity.cache_clear()
    monkeypatch.setattr(point_cache, "SIMULATOR_SOURCES", point_cache.SIMULATOR_SOURCES[:1])
    try:
        assert _key(script, []) != key
    finally:
        point_cache.simulator_identity.cache_clear()
    monkeypatch.undo()
    assert _key(script, []) == key


def test_point_request_round_trips_through_json():
    import json

    request = PointRequest(
        ScriptTarget("t.py", ("--bs", "2"), whole_run=True),
        SimulateConfig(gpu="a100", device_memory=2**30, stacks=None),
        knobs=("checkpoint=Block",),
        sites=True,
        env={"BATCH": "4"},
    )
    assert PointRequest.from_json(json.loads(json.dumps(request.to_json()))) == request

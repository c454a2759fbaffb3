"""Diff of two snapshots and the CI budget check (API and exit codes)."""

from __future__ import annotations

import pickle

import pytest
from analysis_snapshots import BIG_SIZE, training_snapshot

import memlens
from memlens.analysis.budget import Budgets, check_budgets, parse_growth
from memlens.analysis.diff import diff
from memlens.cli.main import main
from memlens.errors import MemlensError

NEW_BIG = 2_000_000
PEAK_A = 1610 + BIG_SIZE
PEAK_B = 1610 + NEW_BIG


@pytest.fixture(scope="module")
def pair():
    return (memlens.load(training_snapshot()).device(0),
            memlens.load(training_snapshot(NEW_BIG)).device(0))  # fmt: skip


def test_diff_figures_sites_stages(pair):
    a, b = pair
    r = diff(a, b)
    fig = {f["name"]: (f["a"], f["b"], f["change"]) for f in r["figures"]}
    assert fig["peak_active_bytes"] == (PEAK_A, PEAK_B, NEW_BIG - BIG_SIZE)
    assert fig["baseline_bytes"] == (1000, 1000, 0)
    assert fig["trace_entries"] == (22, 22, 0)
    pct = {f["name"]: f["change_pct"] for f in r["figures"]}
    assert pct["peak_active_bytes"] == pytest.approx(100 * 500_000 / PEAK_A)
    top = r["sites"][0]
    assert (top["site"], top["a_bytes"], top["b_bytes"], top["change"], top["status"]) == (
        "forward (/home/u/model.py:20)", BIG_SIZE + 110, NEW_BIG + 110, 500_000, "both")  # fmt: skip
    assert all(s["change"] == 0 for s in r["sites"][1:]) and r["sites_total"] == 4
    assert r["stages"] is not None
    st = {(s["name"], s["occurrence"]): s["peak_change"] for s in r["stages"]}
    assert st[("ProfilerStep#1", 0)] == 0 and st[("ProfilerStep#2", 0)] == 500_000


def test_diff_only_in_one_side(pair):
    a, _ = pair
    snap = training_snapshot()
    for e in snap["device_traces"][0]:
        if e["frames"] and e["frames"][0]["name"] == "_init_group":
            e["frames"] = [{"filename": "/home/u/opt2.py", "line": 7, "name": "step"}]
    for b in snap["segments"][0]["blocks"]:
        if b["frames"] and b["frames"][0]["name"] == "_init_group":
            b["frames"] = []
    r = diff(a, memlens.load(snap).device(0))
    status = {s["site"]: (s["status"], s["change"]) for s in r["sites"]}
    assert status["train (/home/u/train.py:50)"] == ("only_a", -300)
    assert status["step (/home/u/opt2.py:7)"] == ("only_b", 300)
    del snap["external_annotations"]
    assert diff(a, memlens.load(snap).device(0))["stages"] is None


def test_check_budgets_api(pair):
    a, b = pair
    r = check_budgets(a, Budgets(max_peak=PEAK_A))
    assert r["ok"] and r["violations"] == []
    r = check_budgets(a, Budgets(max_peak=PEAK_A - 1, max_reserved=3 * 1024 * 1024))
    assert not r["ok"] and len(r["violations"]) == 1 and "exceeds" in r["violations"][0]
    assert [c["ok"] for c in r["checks"]] == [False, True]
    r = check_budgets(b, Budgets(max_growth=0.30), a)
    assert not r["ok"] and r["checks"][0]["growth_bytes"] == 500_000
    assert check_budgets(b, Budgets(max_growth=0.34), a)["ok"]
    assert check_budgets(b, Budgets(max_growth_bytes=500_000), a)["ok"]
    assert not check_budgets(b, Budgets(), a)["ok"]  # a baseline alone allows no growth
    with pytest.raises(MemlensError):
        check_budgets(a, Budgets(max_growth=0.1))


def test_parse_growth():
    assert parse_growth("5%") == (0.05, None)
    assert parse_growth("0.1") == (0.1, None)
    assert parse_growth("512MiB") == (None, 512 * 1024**2)
    with pytest.raises(MemlensError):
        parse_growth("lots")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("snaps")
    pa, pb = d / "a.pickle", d / "b.pickle"
    pa.write_bytes(pickle.dumps(training_snapshot(), protocol=4))
    pb.write_bytes(pickle.dumps(training_snapshot(NEW_BIG), protocol=4))
    return str(pa), str(pb)


def exit_code(args: list[str]) -> int:
    try:
        main(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_check_exit_codes(files, capsys):
    a, b = files
    assert exit_code(["check", a, "--max-peak", f"{PEAK_A}B"]) == 0
    assert exit_code(["check", a, "--max-peak", f"{PEAK_A - 1}B"]) == 1
    err = capsys.readouterr().err
    assert "FAIL" in err and "exceeds the budget" in err
    assert exit_code(["check", a, "--max-reserved", "2MiB"]) == 1
    assert exit_code(["check", b, "--baseline", a, "--max-growth", "30%"]) == 1
    assert exit_code(["check", b, "--baseline", a, "--max-growth", "40%"]) == 0
    assert exit_code(["check", b, "--baseline", a, "--max-growth", "1MiB", "--json"]) == 0
    capsys.readouterr()
    assert exit_code(["check", a, "--max-peak", "1KiB", "--json"]) == 1
    import json

    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and out["devices"][0]["checks"][0]["limit"] == 1024
    # bad input: 2
    assert exit_code(["check", a, "--max-peak", "12XB"]) == 2
    assert exit_code(["check", a]) == 2
    assert exit_code(["check", a, "--max-growth", "5%"]) == 2
    assert exit_code(["check", a + ".missing", "--max-peak", "1GiB"]) == 2


def test_real_diff_of_fullsteps(shared_snapshots_dir, expected_figures):
    n1, n2 = "cs336_memory_ctx128_fullstep.pickle", "cs336_memory_ctx256_fullstep.pickle"
    a = memlens.load(shared_snapshots_dir / n1).device(0)
    b = memlens.load(shared_snapshots_dir / n2).device(0)
    r = diff(a, b, top=None)
    fig = {f["name"]: f["change"] for f in r["figures"]}
    for k in ("peak_active_bytes", "baseline_bytes", "end_active_bytes", "peak_reserved_bytes"):
        assert fig[k] == expected_figures[n2][k] - expected_figures[n1][k]
    # per-site changes add up to the change of the peak
    assert sum(s["change"] for s in r["sites"]) == fig["peak_active_bytes"]
    # the step and phases inferred on both sides, PyTorch's optimizer ranges nested in
    # them; zero_grad holds no event: the step's sibling, just before it (issue 37)
    assert r["stages"] is not None
    assert [s["name"] for s in r["stages"]] == [
        "Optimizer.zero_grad#AdamW.zero_grad", "step#1", "forward", "backward", "optimizer",
        "Optimizer.step#AdamW.step"]  # fmt: skip

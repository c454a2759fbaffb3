"""Leaks across repeated steps, and anomalies (late frees, large temporaries, reserved gaps)."""

from __future__ import annotations

from typing import cast

import pytest
from analysis_snapshots import BIG_SIZE, MiB, expandable_snapshot, training_snapshot

import memlens
from memlens.analysis.anomalies import anomalies
from memlens.analysis.leaks import leaks
from memlens.analysis.results import StageRow


@pytest.fixture(scope="module")
def dev():
    return memlens.load(training_snapshot()).device(0)


def test_leaks_across_steps(dev):
    r = leaks(dev)
    (g,) = r["groups"]
    assert g["base_name"] == "ProfilerStep" and g["count"] == 2
    assert [o["left_alive_bytes"] for o in g["occurrences"]] == [510, 10]
    assert [o["start_bytes"] for o in g["occurrences"]] == [1000, 1510]
    assert (g["growth_bytes"], g["growth_per_step_bytes"]) == (510, 510)
    # a suspect leaves memory behind in more than one step; one-time leftovers apart
    assert (g["suspects_bytes"], g["suspects_count"]) == (20, 2)
    assert [(s["site"], s["bytes"], s["per_occurrence"]) for s in g["suspects"]] == [
        ("forward (/home/u/model.py:20)", 20, [10, 10])]  # fmt: skip
    assert g["first_only_bytes"] == 500
    assert [(s["site"], s["bytes"]) for s in g["first_only"]] == [
        ("train (/home/u/train.py:50)", 300),
        ("torch::autograd::generated::MmBackward0::apply", 200),
    ]
    assert [(s["site"], s["bytes"]) for s in g["grew"]][0] == ("train (/home/u/train.py:50)", 300)


def test_leaks_single_stage_and_none(dev):
    (g,) = leaks(dev, stage="eval")["groups"]
    assert g["count"] == 1 and g["suspects_bytes"] == 5 and g["growth_bytes"] == 0
    # no annotations, nor optimizer calls or backward to read steps from
    r = leaks(memlens.load(expandable_snapshot()).device(0))
    assert r["groups"] == [] and "no annotations" in r["notes"][0]


def test_anomalies(dev):
    r = anomalies(dev)
    assert r["late_frees"]["count"] == 0  # default: another event between request and completion
    assert r["large_temporaries"]["count"] == 0  # 1.5 MB is under 64 MiB
    r = anomalies(dev, late_events=1, late_us=10, temp_min=1_000_000,
                  temp_min_share=0, gap_min=MiB)  # fmt: skip
    lf = r["late_frees"]
    assert (lf["count"], lf["bytes"]) == (1, 100)
    item = lf["items"][0]
    assert (item["address"], item["version"], item["delay_events"], item["delay_us"]) == (
        "0x100400", 1, 1, 10)  # fmt: skip
    lt = r["large_temporaries"]
    assert (lt["count"], lt["bytes"], lt["items"][0]["lifetime_events"]) == (1, BIG_SIZE, 2)
    assert lt["by_site"][0]["site"] == "forward (/home/u/model.py:20)"
    rg = r["reserved_gaps"]
    assert (rg["max_gap_bytes"], rg["max_gap_event"]) == (3 * MiB - 1510, 18)
    (st,) = rg["stretches"]
    assert (st["first_event"], st["last_event"], st["max_gap_event"]) == (10, 19, 18)


def test_anomalies_untimed_uses_events_only():
    snap = training_snapshot()
    for e in snap["device_traces"][0]:
        del e["time_us"]
    # without times only the event gap counts: every completion here follows its request
    r = anomalies(memlens.load(snap).device(0), late_events=1)
    assert r["late_frees"]["count"] == 5 and r["late_frees"]["items"][0]["delay_us"] is None
    assert anomalies(memlens.load(snap).device(0))["late_frees"]["count"] == 0


def test_generated_snapshot_late_frees_and_no_leaks():
    from memlens.simulation.synthetic import generate_trace_dict

    dev = memlens.load(generate_trace_dict(events=8000, side_stream=True)).device(0)
    lf = anomalies(dev)["late_frees"]
    # record_stream frees of the generator complete after a side-stream alloc/free
    assert lf["count"] > 0 and all(it["delay_events"] >= 2 for it in lf["items"])
    assert lf["by_site"][0]["site"] == "torch::autograd::generated::MmBackward0::apply"
    r = leaks(dev)
    groups = {g["base_name"]: g for g in r["groups"]}
    # AdamW state is created in the first step only: one-time, not a leak
    step = groups["Optimizer.step#AdamW.step"]
    assert step["suspects"] == [] and step["first_only_bytes"] > 0


def test_real_leaks_and_anomalies_run(shared_snapshots_dir, expected_figures):
    for name, exp in expected_figures.items():
        dev = memlens.load(shared_snapshots_dir / name).device(exp["device"])
        a = anomalies(dev)
        assert a["reserved_gaps"]["max_gap_bytes"] == int(
            (dev.reserved_after - dev.active_after).max())  # fmt: skip
        leaks(dev)
    dev = memlens.load(shared_snapshots_dir / "cs336_memory_ctx128_fullstep.pickle").device(0)
    (g,) = leaks(dev, stage="Optimizer.step")["groups"]
    # what the optimizer step leaves alive is its state: AdamW's exp_avg and exp_avg_sq
    assert g["suspects"][0]["site"].startswith("step (")
    assert g["suspects_bytes"] == sum(s["bytes"] for s in g["suspects"])


@pytest.mark.parametrize(
    "windows",
    [[(-1, 6), (8, 12), (12, 21)],  # disjoint, in order: one pass
     [(-1, 10), (5, 21)]],  # overlapping (an unmatched END): one window at a time
)  # fmt: skip
def test_left_alive_per_occurrence_equals_a_loop(dev, windows):
    from memlens.analysis.leaks import _left_alive

    occ = [{"start_event": a, "last_event": b} for a, b in windows]
    # _left_alive reads only these two keys of a stage row
    got = [r.tolist() for r in _left_alive(dev, cast("list[StageRow]", occ))]
    # by hand from the trace table in analysis_snapshots: alive at the end are G (event 4),
    # L1 (7), O (8), L2 (19), X (21) and the ghost P (before the trace, in no window)
    alive_at = {4: "G", 7: "L1", 8: "O", 19: "L2", 21: "X"}
    want = [[alive_at[e] for e in sorted(alive_at) if a < e <= b] for a, b in windows]
    assert [[alive_at[int(dev.alloc_event[r])] for r in rows] for rows in got] == want

"""Stages from annotations: pairing, the time-to-event tie rule, per-stage figures, repeated
steps; on the real training-step files, stage peaks equal a by-hand replay."""

from __future__ import annotations

import pytest
from analysis_snapshots import BIG_SIZE, MiB, training_snapshot

import memlens
from memlens.analysis.stages import base_name, compare_steps, stage_ranges, stage_table
from memlens.snapshot.safe_pickle import load_plain_pickle


@pytest.fixture(scope="module")
def table():
    return stage_table(memlens.load(training_snapshot()).device(0), top=5)


def by_name(table, name, occ=0):
    (s,) = [s for s in table["stages"] if s["name"] == name and s["occurrence"] == occ]
    return s


def test_pairing_order_and_nesting(table):
    names = [(s["name"], s["depth"], s["parent"]) for s in table["stages"]]
    assert names == [
        ("setup", 0, None),  # END without START: began before the trace, listed first
        ("ProfilerStep#1", 0, None),
        ("ProfilerStep#2", 0, None),
        ("forward", 1, 2),
        ("eval", 0, None),
    ]
    setup, evals = by_name(table, "setup"), by_name(table, "eval")
    assert setup["open_start"] and setup["start_time_us"] is None and not setup["open_end"]
    assert evals["open_end"] and evals["end_time_us"] is None
    assert by_name(table, "ProfilerStep#2")["base_name"] == "ProfilerStep"


def test_event_ranges_and_tie_rule(table):
    rng = {
        s["name"]: (s["start_event"], s["first_event"], s["last_event"]) for s in table["stages"]
    }
    assert rng["setup"] == (-1, 0, 1)  # events with time <= 1025
    assert rng["ProfilerStep#1"] == (-1, 0, 8)
    assert rng["ProfilerStep#2"] == (8, 9, 20)
    # START at 1110 ties with event 9: the event counts before the stage
    assert rng["forward"] == (9, 10, 13)
    assert rng["eval"] == (20, 21, 21)


def test_stage_figures(table):
    s = by_name(table, "ProfilerStep#1")
    assert (s["active_start_bytes"], s["peak_bytes"], s["peak_event"], s["active_end_bytes"]) == (
        1000, 1510, 8, 1510)  # fmt: skip
    assert (s["allocated_bytes"], s["allocated_count"], s["freed_bytes"], s["freed_count"]) == (
        660, 5, 150, 2)  # fmt: skip
    assert s["net_bytes"] == 510
    assert [(g["site"], g["bytes"]) for g in s["grew"]] == [
        ("train (/home/u/train.py:50)", 300),
        ("torch::autograd::generated::MmBackward0::apply", 200),
        ("forward (/home/u/model.py:20)", 10),
    ]
    s = by_name(table, "ProfilerStep#2")
    assert (s["active_start_bytes"], s["peak_bytes"], s["peak_event"], s["active_end_bytes"]) == (
        1510, 1510 + 100 + BIG_SIZE, 11, 1520)  # fmt: skip
    assert (s["allocated_bytes"], s["freed_bytes"], s["net_bytes"]) == (
        100 + BIG_SIZE + 30 + 10, BIG_SIZE + 30 + 100, 10)  # fmt: skip
    assert (s["reserved_start_bytes"], s["peak_reserved_bytes"], s["reserved_end_bytes"]) == (
        MiB, 3 * MiB, MiB)  # fmt: skip
    # made before the step and freed in it (A2? no: A2 is made inside) -> only L2 grew
    assert [(g["site"], g["bytes"]) for g in s["grew"]] == [("forward (/home/u/model.py:20)", 10)]
    s = by_name(table, "setup")
    assert (s["active_start_bytes"], s["peak_bytes"], s["active_end_bytes"]) == (1000, 1150, 1150)
    s = by_name(table, "forward")
    assert (s["peak_bytes"], s["allocated_bytes"], s["freed_bytes"]) == (
        1610 + BIG_SIZE,
        BIG_SIZE,
        BIG_SIZE,
    )
    s = by_name(table, "eval")
    assert (s["active_start_bytes"], s["peak_bytes"], s["peak_event"]) == (1520, 1525, 21)


def test_compare_steps(table):
    dev = memlens.load(training_snapshot()).device(0)
    (g,) = compare_steps(dev)["groups"]
    assert g["base_name"] == "ProfilerStep" and g["count"] == 2
    assert [r["peak_bytes"] for r in g["steps"]] == [1510, 1610 + BIG_SIZE]
    assert [r["delta_peak_bytes"] for r in g["steps"]] == [None, 100 + BIG_SIZE]
    assert [r["delta_end_bytes"] for r in g["steps"]] == [None, 10]
    assert g["end_growth_bytes"] == 10
    assert stage_ranges(dev)[1] == (0, 8, "ProfilerStep#1", 0)


def test_name_filter_and_no_annotations():
    dev = memlens.load(training_snapshot()).device(0)
    assert [s["name"] for s in stage_table(dev, name="Step")["stages"]] == [
        "ProfilerStep#1", "ProfilerStep#2"]  # fmt: skip
    snap = training_snapshot()
    del snap["external_annotations"]
    t = stage_table(memlens.load(snap).device(0))
    assert t["stages"] == [] and t["notes"]
    # untimed traces cannot place annotations
    snap = training_snapshot()
    for e in snap["device_traces"][0]:
        del e["time_us"]
    t = stage_table(memlens.load(snap).device(0))
    assert t["stages"] == [] and "timestamps" in t["notes"][0]


def test_base_name():
    assert base_name("ProfilerStep#12") == "ProfilerStep"
    assert base_name("Optimizer.step#AdamW.step") == "Optimizer.step#AdamW.step"


# ---- real snapshots: stage figures against a by-hand replay ------------------------------
def hand_active_curve(raw: dict, device: int = 0) -> tuple[int, list[int], list[int]]:
    """Plain-loop replay (MemoryViz semantics): baseline, active after each event, times."""
    trace = raw["device_traces"][device]
    open_: dict[int, int] = {}
    deltas, pre = [], 0
    for e in trace:
        a = e["action"]
        if a == "alloc":
            open_[e["addr"]] = e["size"]
            deltas.append(e["size"])
        elif a == "free_completed":
            if e["addr"] in open_:
                deltas.append(-open_.pop(e["addr"]))
            else:  # allocated before the trace: alive from the start
                pre += e["size"]
                deltas.append(-e["size"])
        else:
            deltas.append(0)
    for seg in raw["segments"]:
        if seg["device"] != device:
            continue
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and b["address"] not in open_:
                pre += b["requested_size"]
    curve, cur = [], pre
    for d in deltas:
        cur += d
        curve.append(cur)
    return pre, curve, [e["time_us"] for e in trace]


FULLSTEP = ["cs336_memory_ctx128_fullstep.pickle", "cs336_memory_ctx256_fullstep.pickle"]


@pytest.mark.parametrize("name", FULLSTEP)
def test_real_fullstep_stage_peaks_match_hand_replay(shared_snapshots_dir, name):
    path = shared_snapshots_dir / name
    with open(path, "rb") as f:
        raw = load_plain_pickle(f)
    base, curve, times = hand_active_curve(raw)
    table = stage_table(memlens.load(path).device(0), top=3)
    got = {s["name"]: s for s in table["stages"]}
    assert set(got) == {"Optimizer.zero_grad#AdamW.zero_grad", "Optimizer.step#AdamW.step"}
    anns = raw["external_annotations"]
    for name_ in got:
        t0 = next(a["time_us"] for a in anns if a["name"] == name_ and a["stage"] == "START")
        t1 = next(a["time_us"] for a in anns if a["name"] == name_ and a["stage"] == "END")
        before = [i for i, t in enumerate(times) if t <= t0]
        start_val = curve[before[-1]] if before else base
        inside = [curve[i] for i, t in enumerate(times) if t0 < t <= t1]
        s = got[name_]
        assert s["active_start_bytes"] == start_val
        assert s["peak_bytes"] == max([start_val, *inside])
        assert s["active_end_bytes"] == (inside[-1] if inside else start_val)
        assert s["last_event"] - s["first_event"] + 1 == len(inside)
    step = got["Optimizer.step#AdamW.step"]
    # the optimizer step holds the trace's peak, and its states grew by ~2x the parameters
    assert step["peak_bytes"] == max(curve)
    assert step["grew"][0]["site"].startswith("step (") and step["net_bytes"] > 0

"""Stages from annotations: pairing, the time-to-event tie rule, per-stage figures, repeated
steps; on the real training-step files, stage peaks equal a by-hand replay."""

from __future__ import annotations

from typing import Any

import pytest
from analysis_snapshots import BIG_SIZE, MiB, training_snapshot
from hand_replay import HandReplay, read_raw

import memlens
from memlens.analysis.results import StageRow, StageTable
from memlens.analysis.stages import base_name, compare_steps, stage_ranges, stage_table
from memlens.views.text.stages import render_stages


@pytest.fixture(scope="module")
def table():
    return stage_table(memlens.load(training_snapshot()).device(0), top=5)


def by_name(table: StageTable, name: str, occ: int = 0) -> StageRow:
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
    # no annotated stage; the steps read from the trace (test_inferred_steps.py) instead
    assert all(s["inferred"] for s in t["stages"]) and "no annotations" in t["notes"][0]
    assert [s["name"] for s in t["stages"] if not s["depth"]] == ["step#1", "step#2"]
    # untimed traces cannot place annotations (the inferred steps need no time)
    snap = training_snapshot()
    for e in snap["device_traces"][0]:
        del e["time_us"]
    t = stage_table(memlens.load(snap).device(0))
    assert all(s["inferred"] for s in t["stages"]) and "timestamps" in t["notes"][0]


def test_base_name():
    assert base_name("ProfilerStep#12") == "ProfilerStep"
    assert base_name("Optimizer.step#AdamW.step") == "Optimizer.step#AdamW.step"


# ---- real snapshots: stage figures against a by-hand replay ------------------------------
FULLSTEP = ["cs336_memory_ctx128_fullstep.pickle", "cs336_memory_ctx256_fullstep.pickle"]


def first_user_frame(frames: list[dict[str, Any]]) -> tuple[str, int] | None:
    """By hand: the innermost Python frame that is not torch's own."""
    for f in frames:
        if f["filename"].endswith(".py") and "/torch/" not in f["filename"]:
            return f["filename"], f["line"]
    return None


@pytest.mark.parametrize("name", FULLSTEP)
def test_real_fullstep_stage_peaks_match_hand_replay(shared_snapshots_dir, name):
    path = shared_snapshots_dir / name
    raw = read_raw(path)
    hand = HandReplay(raw)
    table = stage_table(memlens.load(path).device(0), top=3)
    got = {s["name"]: s for s in table["stages"] if not s["inferred"]}
    assert set(got) == {"Optimizer.zero_grad#AdamW.zero_grad", "Optimizer.step#AdamW.step"}
    # the step read from the trace: the whole trace, its optimizer call where PyTorch's
    # own Optimizer.step range is
    inferred = {s["name"]: s for s in table["stages"] if s["inferred"]}
    assert inferred["step#1"]["peak_bytes"] == max(hand.active)
    assert (inferred["step#1"]["first_event"], inferred["step#1"]["last_event"]) == (
        0, len(hand.trace) - 1)  # fmt: skip
    opt = got["Optimizer.step#AdamW.step"]
    assert (inferred["optimizer"]["first_event"], inferred["optimizer"]["last_event"]) == (
        opt["first_event"], opt["last_event"])  # fmt: skip
    anns = raw["external_annotations"]
    for name_ in got:
        t0 = next(a["time_us"] for a in anns if a["name"] == name_ and a["stage"] == "START")
        t1 = next(a["time_us"] for a in anns if a["name"] == name_ and a["stage"] == "END")
        start_val = hand.active_at(hand.last_at_or_before(t0))
        inside = hand.events_between(t0, t1)
        s = got[name_]
        assert s["active_start_bytes"] == start_val
        assert s["peak_bytes"] == max([start_val, *(hand.active[i] for i in inside)])
        assert s["active_end_bytes"] == (hand.active[inside[-1]] if inside else start_val)
        assert s["last_event"] - s["first_event"] + 1 == len(inside)
        made = [a for a in hand.allocs if a["alloc"] in set(inside)]
        freed = [e["size"] for i, e in enumerate(hand.trace)
                 if i in set(inside) and e["action"] == "free_completed"]  # fmt: skip
        assert (s["allocated_bytes"], s["allocated_count"]) == (
            sum(a["size"] for a in made), len(made))  # fmt: skip
        assert (s["freed_bytes"], s["freed_count"]) == (sum(freed), len(freed))
    step = got["Optimizer.step#AdamW.step"]
    # the optimizer step holds the trace's peak
    assert step["peak_bytes"] == max(hand.active)
    # its sites that grew: what each first user frame made in the step and still held at
    # its end (nothing made before the step was freed by one of these sites)
    last = step["last_event"]
    kept: dict[tuple[str, int], int] = {}
    for a in hand.allocs:
        if step["first_event"] <= a["alloc"] <= last and (a["free"] is None or a["free"] > last):
            site = first_user_frame(a["frames"])
            assert site is not None
            kept[site] = kept.get(site, 0) + a["size"]
    hand_top = sorted((-b, f"step ({fn}:{line})") for (fn, line), b in kept.items())[:2]
    # (sites of equal bytes may come in either order)
    assert sorted((-g["bytes"], g["site"]) for g in step["grew"][:2]) == hand_top


def lightning_step_annotations() -> list[dict[str, Any]]:
    """One step as Lightning and memlens' callback record it: the callback's "forward" is
    entered before `optimizer.step(closure)` and left inside it (on_before_backward, in
    the closure), and its "optimizer" is entered inside it (on_before_optimizer_step) and
    left after it (on_train_batch_end). Two crossings; backward nests in the step."""
    from analysis_snapshots import ann

    return [
        ann("memlens.step#1", "START", 5),
        ann("forward", "START", 6),
        ann("Optimizer.step#AdamW.step", "START", 8),
        ann("forward", "END", 35),
        ann("backward", "START", 35),
        ann("backward", "END", 55),
        ann("optimizer", "START", 65),
        ann("Optimizer.step#AdamW.step", "END", 75),
        ann("optimizer", "END", 80),
        ann("memlens.step#1", "END", 90),
    ]


def test_crossing_ranges_keep_their_own_start_and_end():
    snap = training_snapshot()
    snap["external_annotations"] = lightning_step_annotations()
    dev = memlens.load(snap).device(0)
    t = stage_table(dev, top=0)
    rows = [(s["name"], s["depth"], s["parent"], s["crosses"], s["open_start"], s["open_end"],
             s["start_event"], s["first_event"], s["last_event"])
            for s in t["stages"]]  # fmt: skip
    assert rows == [
        ("memlens.step#1", 0, None, False, False, False, -1, 0, 8),
        ("forward", 1, 0, True, False, False, -1, 0, 3),  # events at t=10..30
        ("Optimizer.step#AdamW.step", 1, 0, True, False, False, -1, 0, 8),  # t=10..70
        ("backward", 2, 2, False, False, False, 3, 4, 6),  # t=40..50
        ("optimizer", 1, 0, True, False, False, 7, 8, 8),  # t=70
    ]
    step = t["stages"][2]
    base = dev.baseline_bytes
    # A1 +100, T1 +50, -50, G +200, A1 -100, L1 +10, O +300: the peak is at its last event
    assert (step["peak_bytes"] - base, step["peak_event"]) == (510, 8)
    assert (t["stages"][1]["peak_bytes"] - base, t["stages"][1]["peak_event"]) == (150, 1)
    # no child runs outside its parent
    for s in t["stages"]:
        if s["parent"] is not None:
            p = t["stages"][s["parent"]]
            assert p["first_event"] <= s["first_event"] and s["last_event"] <= p["last_event"]
    assert "Optimizer.step#AdamW.step (crosses)" in render_stages({**t, "repeated": []})


def test_an_end_closes_the_latest_start_of_its_name_only():
    import numpy as np

    from memlens.analysis.stage_pairing import NO_END, pair_loop

    # A( B( A( )A )B )A: the inner A is closed first; B is not closed by an A's END
    names = ["A", "B", "A", "A", "B", "A", "C"]
    stage = np.array([0, 0, 0, 1, 1, 1, 0], np.int8)
    ann, t0, t1, depth, parent, crosses = pair_loop(names, stage, np.arange(7) * 10)
    assert ann.tolist() == [0, 1, 2, 6]
    assert t0.tolist() == [0, 10, 20, 60] and t1.tolist() == [50, 40, 30, NO_END]
    assert (depth.tolist(), parent.tolist()) == ([0, 1, 2, 0], [-1, 0, 1, -1])
    assert not crosses.any()


def test_ranges_open_at_the_trace_start_come_parent_first():
    """A ring buffer that starts inside a step, inside its optimizer step: both ENDs are
    unmatched, the inner one first. The parent must still come before its child (pre-order),
    as the viewer's stage strip places a child under a parent already drawn."""
    from analysis_snapshots import ann

    from memlens.views.web.data import ViewerData

    snap = training_snapshot()
    snap["external_annotations"] = [
        ann("Optimizer.step#AdamW.step", "END", 15),
        ann("step", "END", 25),
        ann("step", "START", 35),
        ann("step", "END", 75),
    ]
    loaded = memlens.load(snap)
    t = stage_table(loaded.device(0), top=0)
    rows = [(s["name"], s["depth"], s["parent"], s["open_start"]) for s in t["stages"]]
    assert rows == [
        ("step", 0, None, True),
        ("Optimizer.step#AdamW.step", 1, 0, True),
        ("step", 0, None, False),
    ]
    spans = ViewerData([loaded]).annotations(0, 0)["spans"]
    assert [(s["name"], s["depth"]) for s in spans] == [
        ("step", 0),
        ("Optimizer.step#AdamW.step", 1),
        ("step", 0),
    ]


def shrink_snapshot() -> dict[str, Any]:
    """A stage `opt` (t 5..20) frees 100 B that forward made before it (model.py:20) and
    makes 30 B that stay (train.py:50): forward shrank by 100 B, train grew by 30 B."""
    from analysis_snapshots import MODEL, TRAIN

    from snapshot_builders import block, ev, segment

    S = 0x100000
    trace = [
        ev("segment_alloc", S, 2 * MiB, 0),
        ev("alloc", S, 100, 1, frames=[MODEL]),
        ev("free_requested", S, 100, 10, frames=[MODEL]),
        ev("free_completed", S, 100, 10, frames=[MODEL]),
        ev("alloc", S + 512, 30, 11, frames=[TRAIN]),
    ]
    blocks = [
        block(S, 512, 512, "inactive"),
        block(S + 512, 512, 30, "active_allocated", [TRAIN]),
        block(S + 1024, 2 * MiB - 1024, 2 * MiB - 1024, "inactive"),
    ]
    annotations = [
        {"name": "opt", "stage": "START", "device": 0, "time_us": 1005},
        {"name": "opt", "stage": "END", "device": 0, "time_us": 1020},
    ]
    return {
        "segments": [segment(S, blocks)],
        "device_traces": [trace],
        "external_annotations": annotations,
    }


def test_stages_list_the_sites_that_shrank_as_well_as_grew():
    dev = memlens.load(shrink_snapshot()).device(0)
    (row,) = stage_table(dev, top=5)["stages"]
    assert [(s["site"], s["bytes"], s["removed_bytes"]) for s in row["grew"]] == [
        ("train (/home/u/train.py:50)", 30, 0)
    ]
    assert [(s["site"], s["bytes"], s["removed_bytes"]) for s in row["shrank"]] == [
        ("forward (/home/u/model.py:20)", -100, 100)
    ]
    text = render_stages({**stage_table(dev, top=5), "repeated": []})
    assert text.endswith(
        "sites that grew in opt:\n"
        "          30 B        1x  train (/home/u/train.py:50)\n"
        "\n"
        "sites that shrank in opt:\n"
        "        -100 B  forward (/home/u/model.py:20)"
    )

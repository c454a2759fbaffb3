"""Steps read from the trace when nothing annotates them: on the hand-built training trace
without its annotations, on the shared full-step recordings (one step each; ten on the
CNN), never on a forward pass or torch.compile's autotuner; used by stages and leaks."""

from __future__ import annotations

from pathlib import Path

import pytest
from analysis_snapshots import ann, training_snapshot

import memlens
from memlens import DeviceTrace
from memlens.analysis.inferred_steps import inferred_stages, user_marks_steps
from memlens.analysis.leaks import leaks
from memlens.analysis.stages import stage_intervals, stage_table, stages_output
from memlens.views.text.stages import render_stages


def spans(dev: DeviceTrace) -> list[tuple[object, ...]]:
    return [(s["name"], s["depth"], s["parent"], s["first_event"], s["last_event"],
             s["open_end"]) for s in stage_intervals(dev) if s["inferred"]]  # fmt: skip


def test_the_hand_built_trace_without_annotations():
    snap = training_snapshot()
    del snap["external_annotations"]
    dev = memlens.load(snap).device(0)
    # events (analysis_snapshots): 0-3 FWD, 4-6 BW, 7 FWD, 8 OPT (the one optimizer call),
    # 9-13 FWD, 14-18 BW, 19 FWD, 20 stackless, 21 TRAIN: step 2 never reaches its optimizer
    assert spans(dev) == [
        ("step#1", 0, None, 0, 8, False),
        ("forward", 1, 0, 0, 3, False),
        ("backward", 1, 0, 4, 6, False),
        ("optimizer", 1, 0, 8, 8, False),
        ("step#2", 0, None, 9, 21, True),
        ("forward", 1, 4, 9, 13, False),
        ("backward", 1, 4, 14, 18, False),
    ]
    t = stage_table(dev, top=0)
    assert t["notes"][-1].startswith("no step annotations: 2 steps inferred from the trace")
    # leaks compare the two steps (not their phases)
    assert [(g["base_name"], g["count"]) for g in leaks(dev)["groups"]] == [("step", 2)]


def test_annotated_steps_are_not_second_guessed():
    dev = memlens.load(training_snapshot()).device(0)  # ProfilerStep#1, #2
    assert not any(s["inferred"] for s in stage_intervals(dev))
    assert user_marks_steps(["train_step", "train_step"])
    assert user_marks_steps(["ProfilerStep#4"])
    # PyTorch's own optimizer ranges and torch.compile's are not the user's steps
    assert not user_marks_steps(["Optimizer.step#AdamW.step", "Optimizer.step#AdamW.step",
                                 "Optimizer.zero_grad#AdamW.zero_grad",
                                 "_compile.compile_inner (dynamo_timed)",
                                 "_compile.compile_inner (dynamo_timed)"])  # fmt: skip


def _real(shared_snapshots_dir: Path, name: str) -> DeviceTrace:
    path = shared_snapshots_dir / f"{name}.pickle"
    if not path.exists():
        pytest.skip(f"{name}.pickle is absent")
    return memlens.load(path).device()


@pytest.mark.parametrize(
    "name, phases",
    [
        ("cs336_memory_ctx128_fullstep", [(0, 19341), (0, 4691), (4692, 16744), (16747, 19341)]),
        ("cs336_memory_ctx256_fullstep", [(0, 20127), (0, 5645), (5646, 17567), (17570, 20127)]),
        ("wedson_medium_128_training", [(0, 19135), (0, 2793), (2794, 9935), (9938, 19135)]),
    ],
)
def test_one_full_step_and_its_phases(shared_snapshots_dir, name, phases):
    dev = _real(shared_snapshots_dir, name)
    got = spans(dev)
    assert [s[0] for s in got] == ["step#1", "forward", "backward", "optimizer"]
    assert [(s[3], s[4]) for s in got] == phases
    notes = leaks(dev)["notes"]
    assert notes[-1].startswith("one training step in this trace (inferred)")
    assert not any("annotate each training step" in n for n in notes)


def test_the_cnn_has_ten_steps(shared_snapshots_dir):
    dev = _real(shared_snapshots_dir, "eor_nn_train")
    steps = [s for s in stage_intervals(dev) if s["inferred"] and s["depth"] == 0]
    assert [s["name"] for s in steps] == [f"step#{k}" for k in range(1, 11)]
    assert [(s["first_event"], s["last_event"]) for s in steps[:3]] == [
        (0, 579),
        (580, 1160),
        (1161, 1740),
    ]
    (g,) = leaks(dev)["groups"]
    assert (g["base_name"], g["count"], g["suspects_bytes"]) == ("step", 10, 0)
    # the first step leaves the one-time state (gradients, counterfactual buffers): what
    # events 0..579 allocated that is alive at the end, read straight from the columns
    made = (dev.alloc_event >= 0) & (dev.alloc_event <= 579) & (dev.free_event >= dev.n_events)
    assert int(dev.alloc_size[made].sum()) == 39_976_960
    assert g["first_only_bytes"] == g["occurrences"][0]["left_alive_bytes"] == 39_976_960


def test_no_time_column_still_has_its_step(shared_snapshots_dir):
    dev = _real(shared_snapshots_dir, "ftcourse_finetune")  # no time_us at all
    got = spans(dev)
    assert [(s[0], s[3], s[4]) for s in got] == [
        ("step#1", 0, 10304),
        ("forward", 0, 3690),
        ("backward", 3691, 10304),
    ]


@pytest.mark.parametrize(
    "name", ["cs336_compiled_ctx128_forward", "cs336_memory_ctx128_forward",
             "wedson_medium_128_inference"],
)  # fmt: skip
def test_no_steps_in_a_forward_pass_or_the_autotuner(shared_snapshots_dir, name):
    dev = _real(shared_snapshots_dir, name)
    assert inferred_stages(dev) == []
    assert not any(s["inferred"] for s in stage_intervals(dev))


def test_annotated_ranges_nest_inside_inferred_steps():
    snap = training_snapshot()
    # no step annotations; times 1000 + t, events as in analysis_snapshots: e8 (t70) is the
    # optimizer call, e9 (t110) starts step 2, e12-e14 are t130-t140
    snap["external_annotations"] = [
        ann("epoch", "START", 0), ann("Optimizer.step#Adam.step", "START", 65),
        ann("Optimizer.step#Adam.step", "END", 75),
        ann("Optimizer.zero_grad#Adam.zero_grad", "START", 100),
        ann("Optimizer.zero_grad#Adam.zero_grad", "END", 105),
        ann("loss", "START", 125), ann("loss", "END", 145), ann("epoch", "END", 180),
    ]  # fmt: skip
    dev = memlens.load(snap).device(0)
    got = [(s["index"], s["name"], s["depth"], s["parent"], s["first_event"], s["last_event"],
            s["inferred"], s["crosses"]) for s in stage_intervals(dev)]  # fmt: skip
    assert got == [
        # epoch (events 0..19) holds step 1 whole and crosses step 2 (9..21)
        (0, "epoch", 0, None, 0, 19, False, True),
        (1, "step#1", 1, 0, 0, 8, True, False),
        (2, "forward", 2, 1, 0, 3, True, False),
        (3, "backward", 2, 1, 4, 6, True, False),
        (4, "optimizer", 2, 1, 8, 8, True, False),
        # the same events as the optimizer phase: inside it
        (5, "Optimizer.step#Adam.step", 3, 4, 8, 8, False, False),
        # no events, at step 2's first: it ran before step 2 (not in its inferred forward),
        # so it stays in epoch, between the steps
        (6, "Optimizer.zero_grad#Adam.zero_grad", 1, 0, 9, 8, False, False),
        (7, "step#2", 0, None, 9, 21, True, True),
        (8, "forward", 1, 7, 9, 13, True, True),
        # inside step 2 (not under epoch, which does not hold step 2); crosses two phases
        (9, "loss", 1, 7, 12, 14, False, True),
        (10, "backward", 1, 7, 14, 18, True, True),
    ]
    # the text of `memlens stages` indents by the same depth
    text = render_stages(stages_output(dev, top=0))
    assert "\n        Optimizer.step#Adam.step " in text  # depth 3, after the 2-space margin
    assert "\n    loss (crosses) " in text


def test_wedson_optimizer_range_inside_its_inferred_step(shared_snapshots_dir):
    dev = _real(shared_snapshots_dir, "wedson_medium_128_training")
    got = [(s["name"], s["depth"], s["parent"], s["first_event"], s["last_event"])
           for s in stage_intervals(dev)]  # fmt: skip
    assert got == [
        ("step#1", 0, None, 0, 19135),
        ("forward", 1, 0, 0, 2793),
        ("backward", 1, 0, 2794, 9935),
        ("optimizer", 1, 0, 9938, 19135),
        ("Optimizer.step#AdamW.step", 2, 3, 9938, 19135),
    ]


def test_the_viewer_strip_draws_the_same_tree():
    from memlens.views.web.data import ViewerData

    snap = training_snapshot()
    snap["external_annotations"] = [
        ann("Optimizer.step#Adam.step", "START", 65), ann("Optimizer.step#Adam.step", "END", 75),
        ann("loss", "START", 125), ann("loss", "END", 145),
    ]  # fmt: skip
    spans = ViewerData._build_annotations(memlens.load(snap).device(0))["spans"]
    # rows: a stage one below its parent; loss crosses forward (drawn t 1110..1130, the
    # times of events 9 and 13), so it takes the row below; backward starts at 1140, after
    # forward's end, on row 1 again (Optimizer.step's START 1065 is before its phase's
    # first event, 1070: nesting is by events, not by drawn times)
    assert [(s["name"], s["t0"], s["t1"], s["depth"]) for s in spans] == [
        ("step#1", 1010, 1070, 0),
        ("forward", 1010, 1030, 1),
        ("backward", 1040, 1050, 1),
        ("optimizer", 1070, 1070, 1),
        ("Optimizer.step#Adam.step", 1065, 1075, 2),
        ("step#2", 1110, 1200, 0),
        ("forward", 1110, 1130, 1),
        ("loss", 1125, 1145, 2),
        ("backward", 1140, 1170, 1),
    ]


def test_an_empty_annotation_at_a_step_start_is_not_inside_its_forward():
    """Optimizer.zero_grad runs before the step's first allocation: an annotation with no
    event at the step's first event is the step's sibling, listed before it, never a child
    of the inferred forward."""
    snap = training_snapshot()
    snap["external_annotations"] = [
        ann("Optimizer.zero_grad#Adam.zero_grad", "START", 2),
        ann("Optimizer.zero_grad#Adam.zero_grad", "END", 4),
    ]
    dev = memlens.load(snap).device(0)
    got = [(s["name"], s["depth"], s["parent"], s["first_event"], s["last_event"])
           for s in stage_intervals(dev)][:3]  # fmt: skip
    assert got == [
        ("Optimizer.zero_grad#Adam.zero_grad", 0, None, 0, -1),
        ("step#1", 0, None, 0, 8),
        ("forward", 1, 1, 0, 3),
    ]


def test_real_zero_grad_is_before_the_step(shared_snapshots_dir):
    dev = _real(shared_snapshots_dir, "cs336_memory_ctx128_fullstep")
    got = [(s["name"], s["depth"]) for s in stage_intervals(dev)][:3]
    assert got == [("Optimizer.zero_grad#AdamW.zero_grad", 0), ("step#1", 0), ("forward", 1)]

"""`memlens advise` findings a user can act on: the class to checkpoint read from the source
(analysis/source_classes.py), the change to paste, sharding only with --ranks and never for a
run already sharded, exact findings ranked above estimates of similar bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import memlens
from memlens.analysis.advise import advise, rank_key
from memlens.analysis.results import Finding
from memlens.analysis.source_classes import class_of_frame, repeated_block
from shared_data import SHARED_SNAPSHOTS
from snapshot_builders import MiB, block, ev, segment

S1 = 0x10000000
WORKLOAD = SHARED_SNAPSHOTS.parent / "workloads" / "cs336_medium"
BWD = [{"filename": "??", "line": 0, "name": "torch::autograd::Engine::evaluate_function(x)"}]

MODEL_PY = """import torch


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        return torch.relu(y)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(), Block()])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
"""
# Block.forward's lines are 10-11, Model.forward's loop body is line 21


def frame(path: str, line: int, name: str = "forward") -> dict[str, Any]:
    return {"filename": path, "line": line, "name": name}


def step(stack: list[dict[str, Any]], extra: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """A 4 MiB and a 2 MiB activation made under `stack` (+ `extra` frames outermost), freed by
    the backward after a 1 MiB gradient: the peak (7 MiB) holds 6 MiB of activations."""
    a1, a2, b = S1, S1 + 4 * MiB, S1 + 6 * MiB
    frames = [*stack, *extra]
    trace = [
        ev("alloc", a1, 4 * MiB, 0, frames=frames),
        ev("alloc", a2, 2 * MiB, 1, frames=frames),
        ev("alloc", b, MiB, 2, frames=BWD),
        ev("free_completed", a2, 2 * MiB, 3, frames=BWD),
        ev("free_completed", a1, 4 * MiB, 4, frames=BWD),
        ev("free_completed", b, MiB, 5, frames=BWD),
    ]
    blocks = [block(S1, 8 * MiB, 0, "inactive")]
    return {"segments": [segment(S1, blocks, segment_type="large")], "device_traces": [trace]}


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "model.py").write_text(MODEL_PY)
    (root / "other").mkdir()
    (root / "other" / "model.py").write_text("x = 1\n")  # same basename, not pkg/model.py
    return root


RECORDED = "/home/alice/proj/pkg/model.py"  # the path on the machine that recorded
STACK = [frame(RECORDED, 10), frame(RECORDED, 21)]  # Block.forward under Model.forward


def test_class_of_a_frame_is_read_by_the_trailing_parts_of_its_path(source):
    found = class_of_frame(RECORDED, 10, "forward", [str(source)])
    assert found is not None and (found.name, found.line) == ("Block", 4)
    assert found.path == str(source / "pkg" / "model.py")
    assert class_of_frame(RECORDED, 21, "forward", [str(source)]).name == "Model"  # type: ignore[union-attr]
    # the line is not in a method of that name (other code, another version): no answer
    assert class_of_frame(RECORDED, 21, "step", [str(source)]) is None
    assert class_of_frame(RECORDED, 2, "forward", [str(source)]) is None
    assert class_of_frame(RECORDED, 10, "forward", []) is None  # no source here


def test_the_block_called_in_a_loop_is_the_class_to_checkpoint(source):
    frames = [(f["filename"], f["line"], f["name"]) for f in STACK]
    assert repeated_block(frames, [str(source)]) == "Block"
    # without the loop frame the chain is one class: that one
    assert repeated_block(frames[:1], [str(source)]) == "Block"
    assert repeated_block(frames[1:], [str(source)]) == "Model"


def test_checkpoint_finding_names_the_class_and_the_code(source):
    dev = memlens.load(step(STACK)).device(0)
    named = advise(dev, source_roots=[str(source)])["findings"][0]
    assert (named["kind"], named["bytes"], named["knob"]) == (
        "checkpoint",
        6 * MiB,
        "checkpoint=Block",
    )
    assert "checkpointing every Block (memlens plan --what-if checkpoint=Block)" in named["summary"]
    assert (
        "apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Block))"
        in named["change"]
    )
    assert "gradient_checkpointing_enable" not in named["change"]  # no transformers frame
    unnamed = advise(dev)["findings"][0]
    assert unnamed["knob"] is None and "--source-root DIR" in unnamed["summary"]


def test_hugging_face_runs_get_its_spelling(source):
    hf = [frame("/venv/site-packages/transformers/trainer.py", 3000, "training_step")]
    dev = memlens.load(step(STACK, hf)).device(0)
    change = advise(dev, source_roots=[str(source)])["findings"][0]["change"]
    assert "model.gradient_checkpointing_enable(" in change and "isinstance(m, Block)" in change


@pytest.mark.skipif(not WORKLOAD.is_dir(), reason="../shared/workloads is absent")
def test_the_shared_workload_names_transformer_block():
    """The cs336 workload's own source (as its recording names it, /home/lin/...): an
    activation made in CausalMultiHeadSelfAttention.forward (model.py:500), called from
    TransformerBlock.forward (:381), called in BasicsTransformerLM.forward's layer loop (:254)."""
    at = "/home/lin/cs336/assignment2-systems/cs336-basics/cs336_basics/"
    stack = [frame(at + "nn_utils.py", 6, "softmax"), frame(at + "model.py", 500),
             frame(at + "model.py", 381), frame(at + "model.py", 254)]  # fmt: skip
    dev = memlens.load(step(stack)).device(0)
    f = advise(dev, source_roots=[str(WORKLOAD)])["findings"][0]
    assert f["knob"] == "checkpoint=TransformerBlock"
    assert "isinstance(m, TransformerBlock)" in f["change"]


FSDP = frame(
    "/venv/torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py", 200, "foreach_all_gather"
)


def test_no_sharding_for_a_run_already_sharded():
    """The same step with an FSDP2 frame in a stack: --ranks 8 gives no sharding finding."""
    opt = frame("/home/u/train.py", 9, "step")
    snap = step([frame("/home/u/m.py", 1)])
    trace = snap["device_traces"][0]
    trace.insert(0, ev("alloc", S1 + 7 * MiB, MiB // 2, 0, frames=[opt, FSDP]))
    snap["segments"][0]["blocks"] = [block(S1, 8 * MiB, 0, "inactive")]
    dev = memlens.load(snap).device(0)
    result = advise(dev, ranks=8)
    assert "sharding" not in {f["kind"] for f in result["findings"]}
    assert any("already sharded or replicated" in n for n in result["notes"])


def finding(kind: str, nbytes: int, certainty: str) -> Finding:
    return {"kind": kind, "summary": "", "bytes": nbytes, "certainty": certainty, "covers": "",
            "sites": [], "change": "", "knob": None}  # fmt: skip


def test_exact_findings_rank_above_estimates_of_similar_bytes():
    found = [finding("sharding", 33, "estimate"), finding("fragmentation", 17, "exact"),
             finding("checkpoint", 35, "estimate"), finding("oom", 5, "exact")]  # fmt: skip
    # 17 exact weighs 34: above 33, below 35; 5 exact weighs 10
    assert [f["kind"] for f in sorted(found, key=rank_key)] == [
        "checkpoint", "fragmentation", "sharding", "oom"]  # fmt: skip


@pytest.mark.skipif(not SHARED_SNAPSHOTS.is_dir(), reason="../shared/snapshots is absent")
def test_the_cs336_full_step_puts_the_exact_finding_first_with_the_line_to_paste(tmp_path):
    """One GPU, no --ranks: no sharding finding (a note sizes it); fragmentation (exact,
    5.05 GiB by replay) is first, with the setting as a line to paste."""
    snap = SHARED_SNAPSHOTS / "cs336_memory_ctx128_fullstep.pickle"
    env = {"MEMLENS_CACHE_DIR": str(tmp_path)}
    run = [sys.executable, "-m", "memlens", "advise", str(snap)]
    out = subprocess.run([*run, "--json"], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})  # fmt: skip
    result = json.loads(out.stdout)
    first = result["findings"][0]
    assert first["kind"] == "fragmentation" and first["certainty"] == "exact"
    assert "sharding" not in {f["kind"] for f in result["findings"]}
    assert (
        first["change"].splitlines()[0] == "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    )
    text = subprocess.run(run, capture_output=True, text=True, check=True,
                          env={**os.environ, **env}).stdout  # fmt: skip
    assert "\n     export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" in text


def test_the_report_has_the_advice_with_the_change_escaped():
    """The report's advice section: the finding, its bytes and the change to paste, with
    every name from the trace escaped."""
    from memlens.views.report import build_report

    snap = memlens.load(step([frame("/home/u/<i>x</i>.py", 1, "forward")]))
    html, problems = build_report(snap)
    assert problems == []
    section = html.split('id="advise"', 1)[1].split("</section>", 1)[0]
    assert "checkpoint: 6.00 MiB (estimate)" in section
    assert "apply_activation_checkpointing" in section and '<pre class="change">' in section
    assert "<i>x</i>" not in section and "&lt;i&gt;x&lt;/i&gt;.py" in section


def test_the_report_leaves_the_replays_out_of_a_huge_trace(monkeypatch):
    """Past REPLAY_EVENTS the report's advice has no replay (it would take seconds per
    million events) and says so; the trace-only findings stay."""
    from memlens.views.report import build_report
    from memlens.views.report.sections import advise as section

    monkeypatch.setattr(section, "REPLAY_EVENTS", 3)
    html, problems = build_report(memlens.load(step([frame("/home/u/m.py", 1)])))
    part = html.split('id="advise"', 1)[1].split("</section>", 1)[0]
    assert problems == [] and "checkpoint: 6.00 MiB (estimate)" in part
    assert "the allocator replays (the fragmentation finding" in part

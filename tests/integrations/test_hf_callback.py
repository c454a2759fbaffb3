"""memlens.integrations.hf.MemlensCallback in the real transformers.Trainer, on fake CUDA."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

from integration_models import Tokens, expected_stages, our_stages, tiny_llama  # noqa: E402
from transformers import Trainer, TrainingArguments  # noqa: E402

import memlens  # noqa: E402
from memlens.analysis.stages import stage_intervals  # noqa: E402
from memlens.capture.errors import RecordError  # noqa: E402
from memlens.fleet.naming import rank_ids  # noqa: E402
from memlens.integrations.hf import MemlensCallback  # noqa: E402


def train(output_dir: Path, callback: MemlensCallback, max_steps: int, accumulate: int = 1) -> None:
    args = TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=4,
        gradient_accumulation_steps=accumulate,
        max_steps=max_steps,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        dataloader_pin_memory=False,
    )
    Trainer(model=tiny_llama(), args=args, train_dataset=Tokens(), callbacks=[callback]).train()


def test_steps_2_to_3_are_recorded_with_their_stages_and_report(tmp_path):
    callback = MemlensCallback(record_steps=(2, 3))
    with memlens.simulate(cublas_workspace="8MiB"):
        train(tmp_path, callback, max_steps=4)
    folder = tmp_path / "memlens"
    assert sorted(p.name for p in folder.iterdir()) == [
        "oom",
        "steps2-3_rank0.html",
        "steps2-3_rank0.pickle",
    ]
    assert list((folder / "oom").iterdir()) == []  # no OOM, no dump
    assert callback.snapshot_path == folder / "steps2-3_rank0.pickle"
    assert callback.report_path == folder / "steps2-3_rank0.html"
    assert callback.report_path is not None
    assert b"<html" in callback.report_path.read_bytes()[:200].lower()
    dev = memlens.load(callback.snapshot_path).device(0)
    # steps 2 and 3 only (record_steps honoured), each holding forward/backward/optimizer
    assert our_stages(stage_intervals(dev)) == expected_stages(range(2, 4))
    steps = [s for s in stage_intervals(dev) if s["base_name"] == "memlens.step"]
    assert all(s["last_event"] >= s["first_event"] for s in steps)  # events inside each
    assert rank_ids([str(callback.snapshot_path)]) == ([0], "file name")


def test_gradient_accumulation_puts_two_passes_in_one_step(tmp_path):
    callback = MemlensCallback(record_steps=(2, 2), report=False, dump_on_oom=False)
    with memlens.simulate(cublas_workspace="8MiB"):
        train(tmp_path, callback, max_steps=2, accumulate=2)
    assert sorted(p.name for p in (tmp_path / "memlens").iterdir()) == ["steps2-2_rank0.pickle"]
    stages = our_stages(stage_intervals(memlens.load(callback.snapshot_path).device(0)))
    passes = [(name, 1, "memlens.step#2") for name in ("forward", "backward") * 2]
    assert stages == [
        ("memlens.step#2", 0, None),
        *passes,
        ("optimizer", 1, "memlens.step#2"),
    ]


def test_an_oom_is_dumped_with_its_step_in_the_name(tmp_path):
    callback = MemlensCallback(record_steps=(2, 3))
    # 2 x 32 MiB cuBLAS workspaces (forward and backward) cannot fit: the first step's
    # backward runs out of memory.
    with memlens.simulate(device_memory="50MiB"):
        with pytest.raises(torch.OutOfMemoryError):
            train(tmp_path, callback, max_steps=4)
        callback.close()  # the Trainer has no exception hook: stop what it left on
    oom = tmp_path / "memlens" / "oom" / "oom_step1_rank0.pickle"
    assert callback.oom_paths == [oom]
    assert oom.with_suffix(".html").exists()  # close() wrote its report, out of the allocator
    assert callback.snapshot_path is None  # the window (steps 2-3) was never reached
    trace = pickle.loads(oom.read_bytes())["device_traces"][0]
    assert trace[-1]["action"] == "oom"
    dev = memlens.load(oom).device(0)
    open_at_the_oom = [
        (name, depth) for name, depth, _ in our_stages(stage_intervals(dev))
    ]  # it died in backward: that range and its step have no END
    assert open_at_the_oom == [("memlens.step#1", 0), ("forward", 1), ("backward", 1)]
    assert [s["open_end"] for s in stage_intervals(dev) if s["name"] == "backward"] == [True]


@pytest.mark.parametrize("bad", [(0, 2), (3, 2), (1.5, 2), 3, (True, 2)])
def test_record_steps_must_be_a_range_from_1(bad):
    with pytest.raises(RecordError, match="record_steps"):
        MemlensCallback(record_steps=bad)


def test_evaluation_runs_under_simulation(tmp_path):
    """The evaluation loop gathers losses with `.cpu().numpy()`: on fake tensors that is
    zeros of the right shape (their values are fake), noted, instead of an error."""
    callback = MemlensCallback(record_steps=(2, 3), report=False, dump_on_oom=False)
    with memlens.simulate(cublas_workspace="8MiB") as sim:
        args = TrainingArguments(  # inside: the Trainer picks its device from CUDA's state
            output_dir=str(tmp_path),
            per_device_train_batch_size=4,
            per_device_eval_batch_size=4,
            max_steps=4,
            eval_strategy="steps",
            eval_steps=1,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            dataloader_pin_memory=False,
        )
        trainer = Trainer(
            model=tiny_llama(),
            args=args,
            train_dataset=Tokens(),
            eval_dataset=Tokens(),
            callbacks=[callback],
        )
        trainer.train()
        metrics = trainer.evaluate()
    assert metrics["eval_loss"] == 0.0
    assert "tensor values are fake: .numpy() answered zeros" in sim.notes
    dev = memlens.load(callback.snapshot_path).device(0)
    assert our_stages(stage_intervals(dev)) == expected_stages(range(2, 4))

"""memlens.integrations.lightning.MemlensCallback in the real Lightning Trainer, on fake
CUDA."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("lightning.pytorch")
torch = pytest.importorskip("torch")

import lightning.pytorch as pl  # noqa: E402
from integration_models import Tokens, our_stages, tiny_llama  # noqa: E402

import memlens  # noqa: E402
from memlens.analysis.stages import stage_intervals  # noqa: E402
from memlens.fleet.naming import rank_ids  # noqa: E402
from memlens.integrations.lightning import MemlensCallback  # noqa: E402


class TinyLM(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = tiny_llama()

    def training_step(self, batch, batch_idx):
        return self.model(**batch).loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


OPT_STEP = "Optimizer.step#AdamW.step"


def lightning_stages(steps: range) -> list[tuple[str, int, str | None]]:
    """Our ranges as Lightning nests them: optimizer.step(closure) runs the closure, so
    "backward" is inside PyTorch's own Optimizer.step range; "forward" (entered before it,
    left in the closure) and "optimizer" (entered in it, left after it) cross it, so their
    parent is the step (record_function's pairing, analysis/stage_pairing.py)."""
    out: list[tuple[str, int, str | None]] = []
    for n in steps:
        step = f"memlens.step#{n}"
        out += [(step, 0, None), ("forward", 1, step), ("backward", 2, OPT_STEP),
                ("optimizer", 1, step)]  # fmt: skip
    return out


def fit(root: Path, callback: MemlensCallback, max_steps: int, **trainer_options) -> None:
    trainer = pl.Trainer(
        accelerator="gpu",  # the simulated one
        devices=1,
        max_steps=max_steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(root),
        callbacks=[callback],
        **trainer_options,
    )
    trainer.fit(TinyLM(), torch.utils.data.DataLoader(Tokens(), batch_size=4))


def test_steps_3_to_4_are_recorded_with_their_stages_and_report(tmp_path):
    callback = MemlensCallback(record_steps=(3, 4))
    with memlens.simulate(cublas_workspace="8MiB"):
        fit(tmp_path, callback, max_steps=5)
    folder = tmp_path / "memlens"  # no logger: trainer.log_dir is default_root_dir
    assert sorted(p.name for p in folder.iterdir()) == [
        "oom",
        "steps3-4_rank0.html",
        "steps3-4_rank0.pickle",
    ]
    assert callback.report_path == folder / "steps3-4_rank0.html"
    dev = memlens.load(callback.snapshot_path).device(0)
    intervals = stage_intervals(dev)
    assert our_stages(intervals) == lightning_stages(range(3, 5))
    crossing = sorted({s["name"] for s in intervals if s["crosses"]})
    assert crossing == [OPT_STEP, "forward", "optimizer"]
    assert rank_ids([str(callback.snapshot_path)]) == ([0], "file name")


def test_gradient_accumulation_puts_two_passes_in_one_step(tmp_path):
    callback = MemlensCallback(record_steps=(2, 2), report=False)
    with memlens.simulate(cublas_workspace="8MiB"):
        fit(tmp_path, callback, max_steps=3, accumulate_grad_batches=2)
    assert sorted(p.name for p in (tmp_path / "memlens").iterdir()) == [
        "oom",
        "steps2-2_rank0.pickle",
    ]
    stages = our_stages(stage_intervals(memlens.load(callback.snapshot_path).device(0)))
    in_step = ("memlens.step#2",)
    assert stages == [
        ("memlens.step#2", 0, None),
        # the first pass's closure runs alone; the second's inside optimizer.step
        ("forward", 1, *in_step),
        ("backward", 1, *in_step),
        ("forward", 1, *in_step),
        ("backward", 2, OPT_STEP),
        ("optimizer", 1, "memlens.step#2"),
    ]


def test_an_oom_is_dumped_with_its_step_and_its_report_on_the_exception(tmp_path):
    callback = MemlensCallback(record_steps=(2, 3))
    with memlens.simulate(device_memory="50MiB"), pytest.raises(torch.OutOfMemoryError):
        fit(tmp_path, callback, max_steps=4)
    oom = tmp_path / "memlens" / "oom"
    assert sorted(p.name for p in oom.iterdir()) == [
        "oom_step1_rank0.html",  # written by on_exception, outside the allocator
        "oom_step1_rank0.pickle",
    ]
    assert callback.oom_paths == [oom / "oom_step1_rank0.pickle"]
    assert memlens.load(oom / "oom_step1_rank0.pickle").device(0).n_events > 0

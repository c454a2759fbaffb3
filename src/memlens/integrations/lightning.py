"""`MemlensCallback` for the Lightning `Trainer` (`lightning.pytorch`).

    from memlens.integrations.lightning import MemlensCallback

    trainer = lightning.pytorch.Trainer(max_steps=100, callbacks=[MemlensCallback((3, 5))])
    trainer.fit(model, loader)   # <trainer.log_dir>/memlens/steps3-5_rank0.pickle (+ .html)

Stages from Lightning's hooks (automatic optimization): `forward` from
`on_train_batch_start` to `on_before_backward` (training_step, the loss included),
`backward` to `on_after_backward`, `optimizer` from `on_before_optimizer_step` to
`on_train_batch_end` (clipping and the update). A step is `trainer.global_step + 1` when its
first batch starts and ends at the batch that advances `global_step` (with gradient
accumulation one step holds several forward/backward pairs).
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback

from memlens.integrations.callback import RecorderCallback


class MemlensCallback(RecorderCallback, Callback):
    """Record steps `record_steps` (first, last; from 1) of a Lightning run into
    `<output_dir>/memlens/` (default: `trainer.log_dir`, which is `default_root_dir` without
    a logger), one file per rank (`trainer.global_rank`), with the HTML report beside it,
    and dump a snapshot on the first CUDA OOM (`memlens/oom/oom_step<N>_rank<R>.pickle`,
    its report written when Lightning reports the exception).

    `record_steps=None` only watches for OOMs; `dump_on_oom=False` records only the steps.
    `max_entries`, `stacks` and `context` are `memlens.record`'s. After training:
    `snapshot_path`, `report_path`, `oom_paths`.
    """

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        folder = trainer.log_dir or trainer.default_root_dir
        self.recorder.start(folder, rank=trainer.global_rank)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step + 1
        if not self.recorder.in_step or step != self.recorder.step:
            self.recorder.begin_step(step)
        self.recorder.enter("forward")

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self.recorder.exit("forward")
        self.recorder.enter("backward")

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self.recorder.exit("backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.recorder.enter("optimizer")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.recorder.exit("optimizer")
        if trainer.global_step >= self.recorder.step:
            self.recorder.end_step(self.recorder.step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.recorder.finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.recorder.abandon()

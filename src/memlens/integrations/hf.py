"""`MemlensCallback` for Hugging Face `transformers.Trainer`.

    from memlens.integrations.hf import MemlensCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      callbacks=[MemlensCallback(record_steps=(3, 5))])
    trainer.train()   # <args.output_dir>/memlens/steps3-5_rank0.pickle (+ .html)

Where the stages come from: the Trainer has no forward/backward events, so `forward` is the
model's own forward (a forward pre-hook and hook on the model, training mode with grad
only: evaluation passes are not stages), `backward` runs from the end of that forward to
`on_pre_optimizer_step` (the loss's backward and gradient clipping), `optimizer` from
`on_pre_optimizer_step` to `on_optimizer_step`. Steps are `state.global_step + 1` at
`on_step_begin`, i.e. counted from 1 as `max_steps` counts them.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import TrainerCallback

from memlens.integrations.callback import RecorderCallback


class MemlensCallback(RecorderCallback, TrainerCallback):
    """Record steps `record_steps` (first, last; from 1) of a `transformers.Trainer` run into
    `<output_dir>/memlens/` (default: `args.output_dir`), one file per rank, with the HTML
    report beside it, and dump a snapshot on the first CUDA OOM
    (`memlens/oom/oom_step<N>_rank<R>.pickle`).

    `record_steps=None` only watches for OOMs; `dump_on_oom=False` records only the steps
    (history is then off outside them, at no cost). `max_entries`, `stacks` and `context`
    are `memlens.record`'s. After training: `snapshot_path`, `report_path`, `oom_paths`.
    If `trainer.train()` raises, the next run in the process, or `close()`, stops the
    recording it left on.
    """

    # The model's forward hook handles while training (the constructor is the shared one).
    _hooks: tuple[Any, ...] = ()

    def close(self) -> None:
        """Stop what a run that raised left on (recording, OOM watch, model hooks)."""
        self.recorder.abandon()
        self._unhook()

    # ------------------------------------------------------------------ Trainer events
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._unhook()
        self.recorder.start(args.output_dir, rank=args.process_index)
        model = kwargs.get("model")
        if isinstance(model, torch.nn.Module):
            self._hook(model)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.begin_step(state.global_step + 1)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.exit("backward")
        self.recorder.enter("optimizer")

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.exit("optimizer")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.end_step(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.recorder.finish()
        self._unhook()

    # ------------------------------------------------------------------ model hooks
    def _hook(self, model: torch.nn.Module) -> None:
        recorder = self.recorder

        def before_forward(module: torch.nn.Module, inputs: Any) -> None:
            if module.training and torch.is_grad_enabled():
                recorder.exit("backward")  # gradient accumulation: the last micro-batch's
                recorder.enter("forward")

        def after_forward(module: torch.nn.Module, inputs: Any, output: Any) -> None:
            if recorder.is_open("forward"):
                recorder.exit("forward")
                recorder.enter("backward")

        self._hooks = (
            model.register_forward_pre_hook(before_forward),
            model.register_forward_hook(after_forward),
        )

    def _unhook(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = ()

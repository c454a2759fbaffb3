"""What the Hugging Face and Lightning callbacks share: the constructor, whose options make
the `TrainingRecorder`, and the files it wrote. It imports no training framework, so each
callback mixes it in before its framework's callback class."""

from __future__ import annotations

import os
from pathlib import Path

from memlens.capture.backend import DEFAULT_MAX_ENTRIES
from memlens.integrations.recorder import TrainingRecorder


class RecorderCallback:
    """Base of `MemlensCallback` (hf, lightning): the options are `TrainingRecorder`'s; the
    framework's hooks drive `self.recorder`."""

    def __init__(
        self,
        record_steps: tuple[int, int] | None = (3, 5),
        *,
        output_dir: str | os.PathLike[str] | None = None,
        dump_on_oom: bool = True,
        report: bool = True,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        stacks: str = "python",
        context: str | None = "all",
    ) -> None:
        super().__init__()
        self.recorder = TrainingRecorder(
            record_steps,
            output_dir=output_dir,
            dump_on_oom=dump_on_oom,
            report=report,
            max_entries=max_entries,
            stacks=stacks,
            context=context,
        )

    @property
    def snapshot_path(self) -> Path | None:
        return self.recorder.snapshot_path

    @property
    def report_path(self) -> Path | None:
        return self.recorder.report_path

    @property
    def oom_paths(self) -> list[Path]:
        return self.recorder.oom_paths

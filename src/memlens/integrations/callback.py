"""What the Hugging Face and Lightning callbacks share: the constructor, whose options make
the `TrainingRecorder`, and the files it wrote. It imports no training framework, so each
callback mixes it in before its framework's callback class."""

from __future__ import annotations

from pathlib import Path
from types import EllipsisType
from typing import Any

from memlens.integrations.recorder import RecorderConfig, TrainingRecorder


class RecorderCallback:
    """Base of `MemlensCallback` (hf, lightning): `MemlensCallback((3, 5), report=False)`
    or `MemlensCallback(config=RecorderConfig(...))`; the keywords are `RecorderConfig`'s
    fields. The framework's hooks drive `self.recorder`."""

    def __init__(
        self,
        record_steps: tuple[int, int] | None | EllipsisType = ...,
        *,
        config: RecorderConfig | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        self.recorder = TrainingRecorder(record_steps, config=config, **options)

    @property
    def snapshot_path(self) -> Path | None:
        return self.recorder.snapshot_path

    @property
    def report_path(self) -> Path | None:
        return self.recorder.report_path

    @property
    def oom_paths(self) -> list[Path]:
        return self.recorder.oom_paths

"""memlens inside training frameworks: callbacks that record chosen steps of a run.

    from memlens.integrations.hf import MemlensCallback          # transformers.Trainer
    from memlens.integrations.lightning import MemlensCallback   # lightning.pytorch.Trainer

Both drive one `TrainingRecorder` (memlens.integrations.recorder), which records through
memlens's capture layer, so they work on a GPU and under `memlens simulate` alike. Importing
this package imports neither framework; each module imports its own.
"""

from __future__ import annotations

"""Capture real CUDA memory snapshots: `memlens.record`, `memlens.stage`, `memlens.step`,
`memlens.dump_on_oom` and the harness behind `memlens run`.

    with memlens.record("out/step.pickle"):      # see memlens.recording.record
        train_step()

Every call into torch goes through a small backend object (`memlens.capture.backend`), so the
control flow here is tested on machines without a GPU; torch is imported only when used.
"""

from __future__ import annotations

"""`memlens.record`: a capture `Recording` with memlens's HTML report written beside the snapshot.

Capture sits below the views and must not import them, so the report is joined on here,
above both: `Recording` calls back with each snapshot it writes, and this module passes
`write_report_beside` (as `memlens run` does, through `RunOptions.on_snapshot_written`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from memlens.capture.backend import DEFAULT_MAX_ENTRIES
from memlens.capture.capture import Recording

log = logging.getLogger("memlens.record")

_report_warned = False


def write_report_beside(snapshot_path: Path) -> Path | None:
    """Write memlens's HTML report next to the snapshot (`step.pickle` -> `step.html`).
    Never raises: the snapshot is what matters, so a missing or failing report is a
    warning (said once per process) and None."""
    global _report_warned
    html = snapshot_path.with_suffix(".html")
    try:
        from memlens.views.report import write_report

        write_report(snapshot_path, html)
    except Exception as exc:
        if not _report_warned:
            _report_warned = True
            log.warning(
                "memlens: HTML report not written (%s: %s); the snapshot %s is fine, "
                "try `memlens report %s` later",
                type(exc).__name__,
                exc,
                snapshot_path,
                snapshot_path,
            )
        return None
    return html


def record(
    path: str | os.PathLike[str],
    *,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    stacks: str = "python",
    context: str | None = "all",
    report: bool = True,
) -> Recording:
    """Record CUDA memory history around a block or function and save it as a snapshot.

        with memlens.record("out/step.pickle"):
            loss = model(batch).sum(); loss.backward(); opt.step()

        @memlens.record("out/train_step.pickle")
        def train_step(batch): ...

    On entry, recording starts with `torch.cuda.memory._record_memory_history(enabled="all",
    ...)`. On exit, also when the block raises, the snapshot (`torch.cuda.memory._snapshot()`)
    is written to `path` with pickle protocol 4 so PyTorch's own viewer still opens it, then
    recording stops: switching it off clears the history, so the dump always comes first.
    If another `memlens.record` encloses this one, its settings are put back instead, with
    its history intact. The decorator records each call afresh and overwrites `path`.

    Args:
        path: the snapshot file. Missing parent folders are created; a path that cannot be
            written is an error before anything is recorded.
        max_entries: how many alloc/free events the ring buffer keeps (the most recent
            ones). 100,000 by default, as PyTorch's docs suggest: each event with its stack
            costs a few KB of host memory and torch's own default never stops growing.
        stacks: "python" (default) records Python frames only; "all" adds C++ frames, which
            are useful for custom kernels but can make a single dump take minutes while the
            frames are symbolized.
        context: which events carry a stack: "all" (default: allocations and frees),
            "alloc", "state" (only what is live) or None.
        report: write memlens's HTML report beside the snapshot (`out/step.html`). A report
            that fails is a warning; the snapshot is kept.

    Raises:
        memlens.capture.errors.NoCudaError: no CUDA device (use `memlens simulate`).
        memlens.capture.errors.RecordingActiveError: other code is already recording CUDA
            memory history (memlens could not restore it afterwards).
        memlens.capture.errors.UnwritablePathError: `path` cannot be written.
    """
    return Recording(
        path,
        max_entries=max_entries,
        stacks=stacks,
        context=context,
        on_snapshot_written=write_report_beside if report else None,
    )

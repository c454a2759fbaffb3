"""A simulated script that failed: its own traceback, without memlens's frames."""

from __future__ import annotations

import os
import runpy
import traceback
from pathlib import Path

from memlens.errors import MemlensError

# with the separator: a sibling folder named memlens-foo/ is not memlens
_MEMLENS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_RUNPY = runpy.__file__


class ScriptFailed(MemlensError):
    """The simulated script raised or exited non-zero. `written`: where the snapshot up
    to the failure went (None: the run had no trace entries, nothing was written)."""

    def __init__(self, script: str, reason: str, traceback_text: str):
        super().__init__(f"{script} failed ({reason}); no snapshot written")
        self.script, self.reason, self.traceback = script, reason, traceback_text
        self.written: Path | None = None

    def wrote(self, path: Path | None) -> ScriptFailed:
        """Say that the snapshot up to the failure was written to `path` (None: nothing)."""
        self.written = path
        if path is not None:
            self.args = (
                f"{self.script} failed ({self.reason}); the snapshot up to the failure is in "
                f"{path}",
            )
        return self


def _ours(filename: str) -> bool:
    return filename.startswith(_MEMLENS_DIR) or filename in (_RUNPY, "<frozen runpy>")


def script_traceback(exc: BaseException) -> str:
    """The traceback Python would print for the script alone (memlens and runpy frames
    removed, chained exceptions kept)."""
    te = traceback.TracebackException.from_exception(exc)
    seen: set[int] = set()
    todo = [te]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        frames = [f for f in current.stack if not _ours(f.filename)]
        current.stack = traceback.StackSummary.from_list(frames)
        todo.extend(t for t in (current.__cause__, current.__context__) if t is not None)
    return "".join(te.format())

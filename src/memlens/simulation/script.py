"""A script to simulate (`ScriptTarget`), and one that failed: its own traceback, without
memlens's frames."""

from __future__ import annotations

import os
import runpy
import traceback
from dataclasses import dataclass
from pathlib import Path

from memlens.errors import MemlensError

# with the separator: a sibling folder named memlens-foo/ is not memlens
_MEMLENS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_RUNPY = runpy.__file__


@dataclass(frozen=True)
class ScriptTarget:
    """What to run as __main__: `script` (a path, or a module name with `module`, as
    `python -m` takes it), its arguments, and whether the whole run is written even when
    the script writes snapshots itself (`whole_run`). Plain data: it travels as JSON to a
    fresh interpreter (a launcher's rank, a plan point on Dask)."""

    script: str
    args: tuple[str, ...] = ()
    module: bool = False
    whole_run: bool = False

    @property
    def name(self) -> str:
        """As the user would type it: `-m NAME` or the path."""
        return f"-m {self.script}" if self.module else self.script

    def with_args(self, args: tuple[str, ...] | list[str]) -> ScriptTarget:
        return ScriptTarget(self.script, tuple(args), self.module, self.whole_run)

    def absolute(self) -> ScriptTarget:
        """The same target with the script's path absolute (a worker's cwd may differ); a
        module name stays as it is."""
        if self.module:
            return self
        return ScriptTarget(os.path.abspath(self.script), self.args, False, self.whole_run)

    def to_json(self) -> dict[str, object]:
        return {
            "script": self.script,
            "args": list(self.args),
            "module": self.module,
            "whole_run": self.whole_run,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> ScriptTarget:
        args = data["args"]
        assert isinstance(args, list)
        return cls(
            str(data["script"]),
            tuple(str(a) for a in args),
            bool(data["module"]),
            bool(data["whole_run"]),
        )


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

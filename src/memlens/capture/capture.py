"""`memlens.record(...)`: one `with` (or one decorator) around the code, a snapshot comes out."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from memlens.capture import session
from memlens.capture.backend import (
    DEFAULT_MAX_ENTRIES,
    RecordSettings,
    get_backend,
    require_available,
)
from memlens.capture.errors import RecordError
from memlens.capture.output import dump_snapshot, prepare_output, write_report_beside

log = logging.getLogger("memlens.record")

F = TypeVar("F", bound=Callable[..., Any])


class Recording:
    """A recording of CUDA memory history to one snapshot file. Made by `memlens.record`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        stacks: str = "python",
        context: str | None = "all",
        report: bool = True,
    ) -> None:
        self.path = Path(path).expanduser()
        self.settings = RecordSettings(max_entries=max_entries, stacks=stacks, context=context)
        self.report = report
        self.snapshot_path: Path | None = None
        self.report_path: Path | None = None
        self._token: session.Token | None = None

    def _again(self) -> Recording:
        return Recording(
            self.path,
            max_entries=self.settings.max_entries,
            stacks=self.settings.stacks,
            context=self.settings.context,
            report=self.report,
        )

    def __enter__(self) -> Recording:
        if self._token is not None:
            raise RecordError(
                f"this memlens.record({str(self.path)!r}) is already recording; "
                "make a new memlens.record(...) for a nested block"
            )
        backend = get_backend()
        # Every check happens before recording starts, so a bad path costs nothing.
        require_available(backend)
        prepare_output(self.path)
        self._token = session.begin(self.settings, backend)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is None:
            return
        try:
            # The dump comes first: switching recording off clears the history.
            self.snapshot_path = dump_snapshot(token.backend, self.path)
        except Exception as dump_error:
            if exc_type is None:
                raise
            # The block's own exception matters more; say what happened to the snapshot.
            log.warning("memlens: snapshot %s not written: %s", self.path, dump_error)
        finally:
            session.end(token)
        if self.snapshot_path is not None and self.report:
            self.report_path = write_report_beside(self.snapshot_path)

    def __call__(self, fn: F) -> F:
        """Decorator form: every call of `fn` is recorded afresh into the same path."""

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            with self._again():
                return fn(*args, **kwargs)

        return recorded  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"memlens.record({str(self.path)!r}, {self.settings})"


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
    return Recording(path, max_entries=max_entries, stacks=stacks, context=context, report=report)

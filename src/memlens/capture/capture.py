"""`Recording`: one `with` (or one decorator) around the code, a snapshot comes out.

The public `memlens.record(...)` (in `memlens.recording`) makes one and passes the HTML
report writer as `on_snapshot_written`; this layer only writes the snapshot."""

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
from memlens.capture.output import SnapshotWritten, dump_snapshot, prepare_output

log = logging.getLogger("memlens.record")

F = TypeVar("F", bound=Callable[..., Any])


class Recording:
    """A recording of CUDA memory history to one snapshot file. Made by `memlens.record`.

    After the block, `snapshot_path` is the file written (None if the dump failed) and
    `report_path` what `on_snapshot_written` returned for it (memlens.record: the HTML report).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        stacks: str = "python",
        context: str | None = "all",
        on_snapshot_written: SnapshotWritten | None = None,
    ) -> None:
        self.path = Path(path).expanduser()
        self.settings = RecordSettings(max_entries=max_entries, stacks=stacks, context=context)
        self.on_snapshot_written = on_snapshot_written
        self.snapshot_path: Path | None = None
        self.report_path: Path | None = None
        self._token: session.Token | None = None

    def _again(self) -> Recording:
        return Recording(
            self.path,
            max_entries=self.settings.max_entries,
            stacks=self.settings.stacks,
            context=self.settings.context,
            on_snapshot_written=self.on_snapshot_written,
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
        if session.switched_off(token):
            log.warning("memlens: %s: %s", self.path, session.SWITCHED_OFF_MESSAGE)
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
        if self.snapshot_path is not None and self.on_snapshot_written is not None:
            self.report_path = self.on_snapshot_written(self.snapshot_path)

    def __call__(self, fn: F) -> F:
        """Decorator form: every call of `fn` is recorded afresh into the same path."""

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            with self._again():
                return fn(*args, **kwargs)

        return recorded  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"memlens.record({str(self.path)!r}, {self.settings})"

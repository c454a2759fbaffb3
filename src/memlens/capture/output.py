"""Writing snapshots to disk: checked paths, atomic files, pickle protocol 4.

What else is written beside a snapshot (memlens's HTML report) is not decided here: the
layers above pass an ``on_snapshot_written`` callback (``SnapshotWritten``), so capture never
imports the views.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlens.capture.backend import Backend
from memlens.capture.errors import RecordError, UnwritablePathError

# Pinned to 4 rather than Python's default (5 from Python 3.14 on): PyTorch's own viewer
# (pytorch.org/memory_viz) reads snapshots with a small JavaScript unpickler, and protocol 4
# is the one snapshots have always been written with.
PICKLE_PROTOCOL = 4

# Called with the path of a snapshot just written; returns the path of a file it wrote
# beside it (memlens.record and `memlens run` pass the HTML report writer), or None. It
# must not raise: the snapshot is what matters.
SnapshotWritten = Callable[[Path], Path | None]


def prepare_output(path: str | os.PathLike[str]) -> Path:
    """Create the parent folders and prove the file can be written, before recording starts
    (a failed dump at the end would throw away the whole recording)."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise UnwritablePathError(f"cannot write snapshot {target}: it is a directory")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnwritablePathError(
            f"cannot create folder {target.parent} for snapshot {target}: {exc.strerror or exc}"
        ) from exc
    try:
        with tempfile.NamedTemporaryFile(dir=target.parent, prefix=".memlens-probe-"):
            pass
    except OSError as exc:
        raise UnwritablePathError(f"cannot write snapshot {target}: {exc.strerror or exc}") from exc
    if target.exists() and not os.access(target, os.W_OK):
        raise UnwritablePathError(f"cannot write snapshot {target}: permission denied")
    return target


def write_snapshot(snapshot: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Pickle `snapshot` to `path` atomically: a reader never sees half a file."""
    target = Path(path).expanduser()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as exc:
        raise UnwritablePathError(f"cannot write snapshot {target}: {exc.strerror or exc}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(snapshot, f, protocol=PICKLE_PROTOCOL)
        os.replace(tmp, target)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise RecordError(f"cannot write snapshot {target}: {exc.strerror or exc}") from exc
        raise
    return target


def dump_snapshot(backend: Backend, path: str | os.PathLike[str]) -> Path:
    """Take a snapshot from `backend` now and write it to `path`."""
    return write_snapshot(backend.snapshot(), path)


def sibling_path(base: Path, tag: str) -> Path:
    """`out/run.pickle` + "oom" -> `out/run.oom.pickle` (same folder, same suffix)."""
    suffix = base.suffix or ".pickle"
    stem = base.stem if base.suffix else base.name
    return base.with_name(f"{stem}.{tag}{suffix}")

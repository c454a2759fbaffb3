"""Writing snapshots to disk: checked paths, atomic files, pickle protocol 4, the HTML report."""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

from memlens.capture.backend import Backend
from memlens.capture.errors import RecordError, UnwritablePathError

log = logging.getLogger("memlens.record")

# Pinned to 4 rather than Python's default (5 from Python 3.14 on): PyTorch's own viewer
# (pytorch.org/memory_viz) reads snapshots with a small JavaScript unpickler, and protocol 4
# is the one snapshots have always been written with.
PICKLE_PROTOCOL = 4

_report_warned = False


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


def report_path_for(snapshot_path: Path) -> Path:
    return snapshot_path.with_suffix(".html")


def write_report_beside(snapshot_path: Path) -> Path | None:
    """Write memlens's HTML report next to the snapshot. Never raises: the snapshot is what
    matters, so a missing or failing report is a warning (said once per process)."""
    global _report_warned
    html = report_path_for(snapshot_path)
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

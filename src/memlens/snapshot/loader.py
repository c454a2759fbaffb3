"""`memlens.load`: the one way into a snapshot."""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlens.errors import CacheError, SnapshotError
from memlens.snapshot.assemble.builder import build_snapshot
from memlens.snapshot.model import Snapshot
from memlens.snapshot.native import both_asked, python_path
from memlens.snapshot.read.compiled import load_compiled
from memlens.snapshot.read.reader import normalize_top_level, read_source_limited
from memlens.snapshot.reader_agreement import check_agreement, outcome
from memlens.snapshot.store import cache as column_cache


class SnapshotWarning(UserWarning):
    """Something in the snapshot was unusual but loading went on (each kind warned once)."""


class _WarnOnce:
    def __init__(self, source: str, emit: bool) -> None:
        self.source = source
        self.emit = emit
        self.seen: set[str] = set()
        self.messages: list[str] = []

    def __call__(self, key: str, message: str) -> None:
        if key in self.seen:
            return
        self.seen.add(key)
        self.messages.append(message)
        if self.emit:
            _emit(self.source, message, stacklevel=6)


def _emit(source: str, message: str, stacklevel: int) -> None:
    """One snapshot warning, worded the same from a cold load and from the cache."""
    warnings.warn(f"{source}: {message}", SnapshotWarning, stacklevel=stacklevel)


def load(
    source: Any,
    *,
    cache: bool = True,
    warn: bool = True,
) -> Snapshot:
    """Load a memory snapshot safely into the columnar model.

    `source` is a path (.pickle/.pkl, gzip-compressed or not, or .json), bytes, the dict
    from `torch.cuda.memory._snapshot()`, or the segment list of
    `torch.cuda.memory_snapshot()`. Pickles are read with an unpickler that builds plain
    data only: nothing in the file can run. Files are cached as memory-mapped columns
    (see MEMLENS_CACHE_DIR); `cache=False` skips the cache.

    Raises SnapshotError (UnsafePickleError for a pickle that tries to import anything).
    """
    snap, write_cache = load_then_cache(source, cache=cache, warn=warn)
    write_cache()
    return snap


def _nothing_to_write() -> None:
    return None


def load_then_cache(
    source: Any,
    *,
    cache: bool = True,
    warn: bool = True,
) -> tuple[Snapshot, Callable[[], None]]:
    """`load`, except that the column cache a cold load fills is written when the returned
    function is called (it does nothing when there is nothing to write: a cache hit, no
    cache). `memlens view` serves its first paint from the columns in memory while a
    background thread writes them: writing is a third of a cold load (0.7 of 1.6 s at 4M
    events), and the page does not need it. Until it has run, the snapshot has no
    `cache_key` (nothing can be kept beside an entry that does not exist yet)."""
    is_path = isinstance(source, (str, os.PathLike))
    use_cache = (
        cache and is_path and Path(source).is_file() and os.environ.get("MEMLENS_NO_CACHE") != "1"
    )
    name = str(source) if is_path else "<in-memory snapshot>"
    if use_cache:
        try:
            hit = column_cache.load(source)
        except CacheError as exc:
            warnings.warn(
                f"{name}: cache entry unusable ({exc}); rebuilding it",
                SnapshotWarning,
                stacklevel=3,
            )
            column_cache.clear(source)
            hit = None
        if hit is not None:
            # The entry is keyed by the file's content, not its name, so it holds the path
            # string of whichever open wrote it (maybe relative to another directory). The
            # source is the path given this time, as a cold load would have it: as typed
            # (not made absolute), so output is the same with and without the cache.
            hit.source = name
            # the cache keeps the load's warnings: say them again, as the cold load did
            if warn:
                for message in hit.warnings:
                    _emit(name, message, stacklevel=4)
            return hit, _nothing_to_write

    # pickle files go through the compiled reader when it is built (see read/compiled.py)
    use_compiled = is_path and Path(source).is_file()
    if both_asked():
        snap = _build_both_ways(source, name, use_compiled, warn)
    else:
        sink = _WarnOnce(name, warn)
        snap = _build(source, name, use_compiled, sink)
    if not use_cache:
        return snap, _nothing_to_write

    def write_cache() -> None:
        try:
            column_cache.save(snap, source)
        except OSError as exc:
            warnings.warn(
                f"could not write the column cache ({exc}); continuing without it",
                SnapshotWarning,
                stacklevel=3,
            )

    return snap, write_cache


def _build(source: Any, name: str, use_compiled: bool, sink: _WarnOnce) -> Snapshot:
    """The snapshot read from `source` (compiled reader first when `use_compiled`), its
    warnings said once each through `sink`."""
    # Unpickling creates millions of small objects; the cyclic GC would rescan them over
    # and over while they are being built. None of them form cycles we need collected.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        snap = load_compiled(Path(source), sink) if use_compiled else None
        if snap is None:
            raw, name, limits = read_source_limited(source)
            top = normalize_top_level(raw, name, sink)
            snap = build_snapshot(top, name, sink, limits)
            del raw, top
    except SnapshotError:
        raise
    except RecursionError:
        raise SnapshotError(f"{name}: structure nested too deeply to be a snapshot") from None
    except MemoryError:
        raise SnapshotError(f"{name}: not enough memory to read it") from None
    finally:
        if gc_was_enabled:
            gc.enable()
    snap.warnings = sink.messages
    return snap


def _build_both_ways(source: Any, name: str, use_compiled: bool, warn: bool) -> Snapshot:
    """MEMLENS_READER=both: built on the compiled path and on the Python path (reader and
    replay), compared to the byte (reader_agreement.py); the warnings said once, after."""
    compiled = outcome(lambda: _build(source, name, use_compiled, _WarnOnce(name, emit=False)))
    with python_path():
        python = outcome(lambda: _build(source, name, False, _WarnOnce(name, emit=False)))
    snap = check_agreement(name, compiled, python)
    if warn:
        for message in snap.warnings:
            _emit(name, message, stacklevel=5)
    return snap

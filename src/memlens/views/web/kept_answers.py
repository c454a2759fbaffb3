"""Answers kept beside the column cache (issue 37): each device's part of /api/meta and the
whole-trace viewports a page asked for, so that the next `memlens view` of the file serves
its first paint's two answers without computing them (at 4M events: the kept layout
indexes' checks before `/`, then 0.15 s of layout, call sites and JSON before the first
viewport, while the page waits).

Why a kept answer is the one a fresh computation gives, byte for byte: an answer is a
function of the snapshot's columns and of the code that computes it, nothing else. The
columns are those of the cache entry the answer is kept beside (the derived-array hook
ties the set to the entry: format, parent key, and the file's stat or its CRC). The code is
named in the set's name by a fingerprint of memlens's own modules (every source and
compiled module of the package: its path, size and mtime), numpy's version and Python's:
an edit, an upgrade or another numpy finds none of the answers an older one kept. Only the
requests whose answer depends on nothing else are kept (data.py: the whole trace on the
event axis, the page's own sub-pixel threshold, no find query, no memory-axis zoom), each
under the key of its parameters (device, width, height, streams apart, detail): any
window size, the last MAX_KEPT_VIEWS of them per snapshot.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np

from memlens.errors import CacheError
from memlens.snapshot.model import Snapshot
from memlens.snapshot.store import cache

PREFIX = "answer-"
BODY = "body"
# viewports kept per snapshot (each is the size of its answer: ~0.6 MB at 4M events)
MAX_KEPT_VIEWS = 8
PACKAGE = Path(__file__).resolve().parents[2]  # src/memlens (or site-packages/memlens)


def json_bytes(value: Any) -> bytes:
    """An answer as the API sends it (server.JSON renders through this too)."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()


@functools.cache
def fingerprint() -> str:
    """What the answers were computed by: memlens's modules (path, size, mtime), numpy's and
    Python's versions. 16 hex digits, part of every kept set's name."""
    h = hashlib.sha256(f"{np.__version__}|{sys.version}".encode())
    _hash_modules(h, str(PACKAGE), "")
    return h.hexdigest()[:16]


def _hash_modules(h: hashlib._Hash, folder: str, rel: str) -> None:
    """Each module's relative path, size and mtime into h: a folder's own files in name
    order, then its subfolders in name order. With os.scandir and plain string paths: at
    the first request of a start, os.walk with relpath took 11 ms of its 30 (330 files)."""
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        if e.name.endswith((".py", ".so", ".pyd")) and e.is_file():
            st = e.stat()
            h.update(f"{rel}{e.name}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    for e in entries:
        if e.is_dir(follow_symlinks=False):  # (as os.walk: not into a linked folder)
            _hash_modules(h, e.path, f"{rel}{e.name}/")


def set_name(key: str) -> str:
    return f"{PREFIX}{fingerprint()}-{key}"


def load(snap: Snapshot, key: str) -> bytes | None:
    """The answer kept under `key` for snap by this code, None when there is none or it
    cannot be trusted (damaged, or not written for snap's entry)."""
    try:
        got = cache.load_derived(snap, set_name(key), [BODY])
    except CacheError:
        return None
    if got is None:
        return None
    body = got[BODY]
    if body.dtype != np.uint8 or not len(body) or body[0] != ord("{") or body[-1] != ord("}"):
        return None  # (only a JSON object is ever kept)
    return body.tobytes()


def has_views(snap: Snapshot, device: int) -> bool:
    """Whether this code kept any viewport of `device` for snap (a page's first viewport
    will likely be one of them)."""
    folder = _derived(snap)
    want = set_name(f"view-d{device}-")
    try:
        return folder is not None and any(p.name.startswith(want) for p in folder.iterdir())
    except OSError:
        return False


def save(snap: Snapshot, key: str, body: bytes) -> bool:
    """Keep `body` under `key` for snap; False when snap has no cache entry. Drops the
    answers kept by other code, and the oldest viewports past MAX_KEPT_VIEWS."""
    kept = cache.save_derived(snap, set_name(key), {BODY: np.frombuffer(body, dtype=np.uint8)})
    folder = _derived(snap)
    if kept and folder is not None:
        _prune(folder)
    return kept


def _derived(snap: Snapshot) -> Path | None:
    """The folder of snap's derived sets (the cache's layout: entry/derived/NAME)."""
    return None if snap.cache_key is None else cache.cache_root() / snap.cache_key / "derived"


def _prune(folder: Path) -> None:
    mine = PREFIX + fingerprint() + "-"
    views: list[tuple[int, Path]] = []
    for p in folder.iterdir():
        if not p.name.startswith(PREFIX):
            continue
        if not p.name.startswith(mine):
            shutil.rmtree(p, ignore_errors=True)
        elif p.name.startswith(mine + "view-"):
            with contextlib.suppress(OSError):  # (removed meanwhile)
                views.append((p.stat().st_mtime_ns, p))
    for _, p in sorted(views, reverse=True)[MAX_KEPT_VIEWS:]:
        shutil.rmtree(p, ignore_errors=True)


class Keeper:
    """The answers computed while serving, kept once the server has time: by flush()
    (ViewerData.warm, after the first viewport and the cache writes), or, once that has
    run, on a thread of their own."""

    def __init__(self) -> None:
        self._pending: dict[tuple[int, str], tuple[Snapshot, bytes]] = {}
        self._lock = threading.Lock()
        self._flushed = False  # flush() has run once: later answers are kept at once

    def put(self, snap: Snapshot, key: str, body: bytes) -> None:
        with self._lock:
            self._pending[(id(snap), key)] = (snap, body)
            later = self._flushed
        if later:
            threading.Thread(target=self.flush, name="memlens-keep", daemon=True).start()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = list(self._pending.items()), {}
            self._flushed = True
        for (_, key), (snap, body) in pending:
            with contextlib.suppress(OSError):  # a read-only or full cache: computed again
                save(snap, key, body)

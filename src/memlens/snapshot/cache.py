"""On-disk cache of the columns: a second open of the same file is memory-mapped .npy files.

Layout: <cache root>/<key>/meta.json + one .npy per column. The key hashes the file's
real path, size, mtime and inode together with CACHE_FORMAT, so an edited file or a new
memlens column layout simply misses. Entries are written to a temporary directory and
renamed into place, so a crash never leaves a half-written entry that looks complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from memlens.errors import CacheError
from memlens.snapshot.model import Annotations, DeviceTrace, Frames, Segments, Snapshot, Stacks

# Bump whenever the columns or their meaning change.
CACHE_FORMAT = 3
# Keep at most this many entries; the least recently written go first.
MAX_ENTRIES = int(os.environ.get("MEMLENS_CACHE_MAX_ENTRIES", "32"))

_DEVICE_SCALARS = ("baseline_bytes", "reserved_start_bytes", "frees_from_requested")
_DEVICE_ARRAYS = [
    f.name
    for f in dataclasses.fields(DeviceTrace)
    if f.name not in (*_DEVICE_SCALARS, "device", "snapshot")
]


def cache_root() -> Path:
    env = os.environ.get("MEMLENS_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memlens"


def file_identity(path: str | os.PathLike) -> dict[str, Any]:
    p = Path(path).resolve()
    st = p.stat()
    return {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": st.st_ino}


def cache_key(identity: dict[str, Any]) -> str:
    blob = json.dumps({**identity, "format": CACHE_FORMAT}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def entry_dir(path: str | os.PathLike) -> tuple[Path, dict[str, Any]]:
    ident = file_identity(path)
    return cache_root() / cache_key(ident), ident


def _save_dataclass(obj: Any, prefix: str, out: Path) -> None:
    for f in dataclasses.fields(obj):
        np.save(out / f"{prefix}.{f.name}.npy", getattr(obj, f.name), allow_pickle=False)


def _load_dataclass(cls: Any, prefix: str, src: Path, mmap: bool) -> Any:
    mode = "r" if mmap else None
    return cls(
        **{
            f.name: np.load(src / f"{prefix}.{f.name}.npy", mmap_mode=mode, allow_pickle=False)
            for f in dataclasses.fields(cls)
        }
    )


def save(snap: Snapshot, path: str | os.PathLike) -> Path:
    target, ident = entry_dir(path)
    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        meta = {
            "format": CACHE_FORMAT,
            "identity": ident,
            "source": snap.source,
            "strings": snap.strings,
            "streams": snap.streams,
            "allocator_settings": snap.allocator_settings,
            "action_names": snap.action_names,
            "warnings": snap.warnings,
            "format_notes": snap.format_notes,
            "devices": {
                str(d): {k: getattr(t, k) for k in _DEVICE_SCALARS} for d, t in snap.traces.items()
            },
        }
        _save_dataclass(snap.frames, "frames", tmp)
        _save_dataclass(snap.stacks, "stacks", tmp)
        _save_dataclass(snap.segments, "segments", tmp)
        _save_dataclass(snap.annotations, "annotations", tmp)
        for d, t in snap.traces.items():
            for name in _DEVICE_ARRAYS:
                np.save(tmp / f"d{d}.{name}.npy", getattr(t, name), allow_pickle=False)
        # meta.json last: its presence marks a complete entry
        (tmp / "meta.json").write_text(json.dumps(meta))
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(root, keep=target)
    return target


def _prune(root: Path, keep: Path) -> None:
    entries = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and p != keep]
    excess = len(entries) + 1 - MAX_ENTRIES
    if excess <= 0:
        return
    entries.sort(key=lambda p: p.stat().st_mtime)
    for p in entries[:excess]:
        shutil.rmtree(p, ignore_errors=True)


def load(path: str | os.PathLike, *, mmap: bool = True) -> Snapshot | None:
    """The cached snapshot for `path`, None on a miss; CacheError if the entry is unusable."""
    target, ident = entry_dir(path)
    meta_path = target / "meta.json"
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != CACHE_FORMAT or meta.get("identity") != ident:
            raise CacheError("entry is stale")
        snap = Snapshot(
            source=meta["source"],
            strings=meta["strings"],
            frames=_load_dataclass(Frames, "frames", target, mmap),
            stacks=_load_dataclass(Stacks, "stacks", target, mmap),
            streams=meta["streams"],
            segments=_load_dataclass(Segments, "segments", target, mmap),
            annotations=_load_dataclass(Annotations, "annotations", target, mmap),
            allocator_settings=meta["allocator_settings"],
            action_names=meta["action_names"],
            warnings=meta["warnings"],
            format_notes=meta["format_notes"],
            from_cache=True,
        )
        mode = "r" if mmap else None
        for d, scalars in meta["devices"].items():
            dev = int(d)
            arrays = {
                name: np.load(target / f"d{dev}.{name}.npy", mmap_mode=mode, allow_pickle=False)
                for name in _DEVICE_ARRAYS
            }
            snap.traces[dev] = DeviceTrace(device=dev, snapshot=snap, **arrays, **scalars)
        return snap
    except CacheError:
        raise
    except Exception as exc:  # any damage: truncated .npy, bad JSON, missing file
        raise CacheError(f"{type(exc).__name__}: {exc}") from None


def clear(path: str | os.PathLike) -> None:
    target, _ = entry_dir(path)
    shutil.rmtree(target, ignore_errors=True)

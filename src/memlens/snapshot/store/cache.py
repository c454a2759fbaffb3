"""On-disk cache of the columns: a second open of the same file is memory-mapped .npy files.

Layout: <cache root>/<key>/meta.json + one .npy per column. Entries are written to a
temporary directory and renamed into place, so a crash never leaves a half-written entry
that looks complete; temporary directories a killed writer left behind are pruned.

The key is the file's content identity: its size, a hash of its first and last MiB, and
its device, inode, mtime and ctime. Hashing a whole 1 GB file costs 2.4 s (sha256) or
0.36 s (crc32) on this class of machine, more than a cache hit itself, while the kernel
updates ctime on every write and no user call can set it back: a file rewritten in place
with the same size and mtime, or deleted and recreated on a reused inode, gets a new ctime
and so a new key (as does a chmod or a copy: a harmless miss).

An entry is checked before use: format, identity, the type of every meta field, each
column's dtype, shape and checksum as written (CRC-32C: _checksum_of; read only for a
file whose size, mtime, ctime or inode moved since it was written: _stat_of), and the
cross references between tables (string, frame and stack ids, offsets: entry_checks).
Any doubt is a CacheError, and the loader rebuilds.

Derived arrays (`save_derived`/`load_derived`): a layer above may keep what it computes from
the columns (e.g. the viewer's indexes) in <entry>/derived/<name>/, checked the same way
(dtype, shape, checksum) and tied to the entry's key, so they go when the entry goes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import re
import shutil
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memlens.errors import CacheError
from memlens.snapshot.annotations import Annotations
from memlens.snapshot.model import DeviceTrace, Frames, Segments, Snapshot, Stacks
from memlens.snapshot.store.entry_checks import check_meta, check_references
from memlens.snapshot.store.text_bound import text_too_large

try:  # the compiled CRC-32C (setup.py builds it when a C compiler is there)
    from memlens.snapshot.store import _checksum as _checksum  # the CI test checks it
except ImportError:  # pragma: no cover - exercised by the test that hides it
    _checksum = None  # type: ignore[assignment]

# Bump whenever the columns or their meaning change.
CACHE_FORMAT = 5  # 5: DeviceTrace.pool and the snapshot's pools
# A temporary entry older than this was left by a writer that died: prune it.
STALE_TMP_SECONDS = 3600
EDGE_BYTES = 1 << 20
# Keep at most this many entries; the least recently written go first.
MAX_ENTRIES = int(os.environ.get("MEMLENS_CACHE_MAX_ENTRIES", "32"))

DEVICE_SCALARS = ("baseline_bytes", "reserved_start_bytes", "frees_from_requested")
DEVICE_ARRAYS = [
    f.name
    for f in dataclasses.fields(DeviceTrace)
    if f.name not in (*DEVICE_SCALARS, "device", "snapshot")
]


def cache_root() -> Path:
    env = os.environ.get("MEMLENS_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memlens"


def file_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What the cache key is made of (see the module docstring for why this and not more)."""
    p = Path(path).resolve()
    with open(p, "rb") as fh:
        st = os.fstat(fh.fileno())
        edges = hashlib.sha256(fh.read(EDGE_BYTES))
        if st.st_size > EDGE_BYTES:
            fh.seek(max(EDGE_BYTES, st.st_size - EDGE_BYTES))
            edges.update(fh.read(EDGE_BYTES))
    return {
        "path": str(p),
        "size": st.st_size,
        "edges_sha256": edges.hexdigest(),
        "device": st.st_dev,
        "inode": st.st_ino,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
    }


def cache_key(identity: dict[str, Any]) -> str:
    blob = json.dumps({**identity, "format": CACHE_FORMAT}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def entry_dir(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    ident = file_identity(path)
    return cache_root() / cache_key(ident), ident


def _save_array(out: Path, name: str, array: np.ndarray, manifest: dict[str, Any]) -> None:
    path = out / f"{name}.npy"
    np.save(path, array, allow_pickle=False)
    manifest[name] = {
        "dtype": np.asarray(array).dtype.str,
        "shape": list(np.shape(array)),
        **_checksum_of(path),
        "stat": _stat_of(path),
    }


def _stat_of(path: Path) -> list[int]:
    """A column file as its writer left it: size, mtime, ctime, inode and device.

    Why a warm open trusts this instead of reading every byte: the CRC of every column
    (~440 MB at 4M events) was a fifth of a warm first paint, to find changes that the
    kernel already records. Any write, truncation, chmod, utime or replacement of the file
    (a copy, an editor's save, a restore that sets the mtime back) gives it a new ctime or
    inode, which no user call can set back; the CRC then decides. What it no longer
    catches is damage below the file system that leaves the metadata alone (a bad disk
    returning wrong bytes); the cross-reference checks (entry_checks) still run on every
    open, so no id read from a column can point outside its table."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _checksum_of(path: Path) -> dict[str, int]:
    """A column file's checksum as the manifest keeps it: {"crc32c": ...} with the compiled
    helper, {"crc32": ...} (zlib's CRC-32) without it.

    Why CRC-32C: a file that changed since it was written (_stat_of) is checked whole
    before any of it is used (~500 MB at 4M events). zlib's CRC-32 over read() chunks cost
    ~0.44 s of that on this box; CRC-32C (same width and class: every single-bit error and
    every burst of up to 32 bits is caught) in hardware over the memory-mapped file,
    ~0.11 s (docs/benchmarks.md)."""
    if _checksum is not None:
        return {"crc32c": _file_crc(path, _checksum.crc32c)}
    return {"crc32": _file_crc(path, zlib.crc32)}


def _whole_file_map(path: Path, array: np.ndarray) -> mmap.mmap | None:
    """The mapping a memory-mapped column reads through, when it covers the whole file:
    checked through it, its pages are mapped once (the check touches every page; at 10M
    events, faulting them in twice cost more than the CRC itself)."""
    mapped = getattr(array, "_mmap", None)  # numpy.memmap's own mapping (from offset 0)
    if isinstance(mapped, mmap.mmap) and len(mapped) == os.path.getsize(path):
        return mapped
    return None


def _checksum_matches(path: Path, want: dict[str, Any], mapped: mmap.mmap | None = None) -> bool:
    """Does the file match the manifest's checksum (CRC-32C, or CRC-32 in an entry written
    without the compiled helper)? A CRC-32C entry read where the helper is not built
    cannot be checked: a CacheError, and the entry is written again."""
    if "crc32c" in want:
        if _checksum is None:
            raise CacheError("the entry's checksum (CRC-32C) needs the compiled helper")
        return _file_crc(path, _checksum.crc32c, mapped) == int(want["crc32c"])
    return _file_crc(path, zlib.crc32, mapped) == want.get("crc32")


def _file_crc(
    path: Path, crc: Callable[[bytes | memoryview], int], mapped: mmap.mmap | None = None
) -> int:
    """crc over the file (`mapped`: all of it, already mapped), memory-mapped: no copy
    through read() buffers."""
    if mapped is not None:
        with memoryview(mapped) as view:
            return crc(view)
    with open(path, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:  # an empty file cannot be mapped
            return crc(b"")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m, memoryview(m) as view:
            return crc(view)


def _load_array(src: Path, name: str, manifest: dict[str, Any], mmap: bool) -> np.ndarray:
    want = manifest.get(name)
    if not isinstance(want, dict):
        raise CacheError(f"column {name} is not in the manifest")
    path = src / f"{name}.npy"
    before = _stat_of(path)
    array: np.ndarray = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    # the stat before and after the open: the file read is the one its writer left
    untouched = want.get("stat") == before == _stat_of(path)
    if not untouched and not _checksum_matches(path, want, _whole_file_map(path, array)):
        raise CacheError(f"column {name} was changed after it was written")
    if array.dtype.str != want.get("dtype") or list(array.shape) != want.get("shape"):
        raise CacheError(f"column {name} has the wrong type or shape")
    if array.ndim != 1:
        raise CacheError(f"column {name} is not one-dimensional")
    return array


def _save_dataclass(obj: Any, prefix: str, out: Path, manifest: dict[str, Any]) -> None:
    for f in dataclasses.fields(obj):
        _save_array(out, f"{prefix}.{f.name}", getattr(obj, f.name), manifest)


def _load_dataclass(cls: Any, prefix: str, src: Path, manifest: dict[str, Any], mmap: bool) -> Any:
    return cls(
        **{
            f.name: _load_array(src, f"{prefix}.{f.name}", manifest, mmap)
            for f in dataclasses.fields(cls)
        }
    )


def save(snap: Snapshot, path: str | os.PathLike[str]) -> Path | None:
    """Write `snap`'s entry for the file at `path`; None, and nothing written, when its
    text would pass the bound above."""
    target, ident = entry_dir(path)
    if text_too_large([snap.strings, snap.allocator_settings], int(ident.get("size", 0))):
        return None
    root = target.parent
    root.mkdir(parents=True, exist_ok=True)
    _prune_stale_tmp(root)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    manifest: dict[str, Any] = {}
    try:
        meta = {
            "format": CACHE_FORMAT,
            "identity": ident,
            "source": snap.source,
            "strings": snap.strings,
            "streams": snap.streams,
            "pools": [list(p) for p in snap.pools],
            "allocator_settings": snap.allocator_settings,
            "action_names": snap.action_names,
            "warnings": snap.warnings,
            "format_notes": snap.format_notes,
            "devices": {
                str(d): {k: getattr(t, k) for k in DEVICE_SCALARS} for d, t in snap.traces.items()
            },
        }
        _save_dataclass(snap.frames, "frames", tmp, manifest)
        _save_dataclass(snap.stacks, "stacks", tmp, manifest)
        _save_dataclass(snap.segments, "segments", tmp, manifest)
        _save_dataclass(snap.annotations, "annotations", tmp, manifest)
        for d, t in snap.traces.items():
            for name in DEVICE_ARRAYS:
                _save_array(tmp, f"d{d}.{name}", getattr(t, name), manifest)
        meta["columns"] = manifest
        _commit(tmp, target, meta)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(root, keep=target)
    snap.cache_key = target.name
    return target


def _commit(tmp: Path, target: Path, meta: dict[str, Any]) -> None:
    """Finish an entry written in `tmp` and rename it to `target`: meta.json last, as its
    presence marks a complete entry."""
    (tmp / "meta.json").write_text(json.dumps(meta))
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def _prune_stale_tmp(root: Path) -> None:
    """Temporary entries (".<key>.xxxx") of a writer that was killed mid-write."""
    cutoff = time.time() - STALE_TMP_SECONDS
    for p in root.iterdir():
        try:
            if p.name.startswith(".") and p.is_dir() and p.stat().st_mtime < cutoff:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            continue


def _prune(root: Path, keep: Path) -> None:
    # Several processes (memlens fleet's workers) may prune one cache at once: an entry can
    # vanish between listing it and reading its mtime, which must not fail the save.
    entries: list[tuple[float, Path]] = []
    for p in root.iterdir():
        if p.name.startswith(".") or p == keep:
            continue
        try:
            if p.is_dir():
                entries.append((p.stat().st_mtime, p))
        except FileNotFoundError:
            continue
    excess = len(entries) + 1 - MAX_ENTRIES
    if excess <= 0:
        return
    entries.sort(key=lambda e: e[0])
    for _, p in entries[:excess]:
        shutil.rmtree(p, ignore_errors=True)


def load(path: str | os.PathLike[str], *, mmap: bool = True) -> Snapshot | None:
    """The cached snapshot for `path`, None on a miss; CacheError if the entry is unusable."""
    target, ident = entry_dir(path)
    meta_path = target / "meta.json"
    if not meta_path.exists():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        if not isinstance(meta, dict):
            raise CacheError("meta.json is not an object")
        if meta.get("format") != CACHE_FORMAT or meta.get("identity") != ident:
            raise CacheError("entry is stale")
        check_meta(meta, DEVICE_SCALARS)
        columns = meta["columns"]
        snap = Snapshot(
            source=meta["source"],
            strings=meta["strings"],
            frames=_load_dataclass(Frames, "frames", target, columns, mmap),
            stacks=_load_dataclass(Stacks, "stacks", target, columns, mmap),
            streams=meta["streams"],
            pools=[(int(p[0]), int(p[1])) for p in meta["pools"]],
            segments=_load_dataclass(Segments, "segments", target, columns, mmap),
            annotations=_load_dataclass(Annotations, "annotations", target, columns, mmap),
            allocator_settings=meta["allocator_settings"],
            action_names=meta["action_names"],
            warnings=meta["warnings"],
            format_notes=meta["format_notes"],
            from_cache=True,
            cache_key=target.name,
        )
        for d, scalars in meta["devices"].items():
            dev = int(d)
            arrays: dict[str, Any] = {  # DeviceTrace's array fields, by name
                name: _load_array(target, f"d{dev}.{name}", columns, mmap) for name in DEVICE_ARRAYS
            }
            snap.traces[dev] = DeviceTrace(device=dev, snapshot=snap, **arrays, **scalars)
        check_references(snap)
        return snap
    except CacheError:
        raise
    except Exception as exc:  # any damage: truncated .npy, bad JSON, missing file
        raise CacheError(f"{type(exc).__name__}: {exc}") from None


_DERIVED_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


def _derived_dir(snap: Snapshot, name: str) -> Path | None:
    """Where `name`'s arrays for `snap` live; None when snap did not come from or go to an
    entry that is still there (then there is nowhere to keep them)."""
    if not _DERIVED_NAME.fullmatch(name):
        raise ValueError(f"bad derived-array set name {name!r}")
    if snap.cache_key is None:
        return None
    entry = cache_root() / snap.cache_key
    return entry / "derived" / name if (entry / "meta.json").is_file() else None


def save_derived(snap: Snapshot, name: str, arrays: dict[str, np.ndarray]) -> bool:
    """Keep one-dimensional `arrays` computed from snap's columns beside its cache entry
    (written aside and renamed into place); False when snap has no entry."""
    target = _derived_dir(snap, name)
    if target is None:
        return False
    target.parent.mkdir(exist_ok=True)
    _prune_stale_tmp(target.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
    manifest: dict[str, Any] = {}
    try:
        for key, array in arrays.items():
            _save_array(tmp, key, array, manifest)
        _commit(
            tmp, target, {"format": CACHE_FORMAT, "parent": snap.cache_key, "columns": manifest}
        )
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def load_derived(snap: Snapshot, name: str, keys: list[str]) -> dict[str, np.ndarray] | None:
    """The arrays `save_derived` kept for snap under `name` (memory-mapped), None when there
    are none; CacheError when they are damaged or were not written for this entry (the
    caller recomputes them and saves again)."""
    target = _derived_dir(snap, name)
    if target is None or not (target / "meta.json").is_file():
        return None
    try:
        meta = json.loads((target / "meta.json").read_text())
        if not isinstance(meta, dict) or not isinstance(meta.get("columns"), dict):
            raise CacheError("derived meta.json is malformed")
        if meta.get("format") != CACHE_FORMAT or meta.get("parent") != snap.cache_key:
            raise CacheError("derived arrays are stale")
        if set(meta["columns"]) != set(keys):
            raise CacheError("derived arrays are not the set asked for")
        return {key: _load_array(target, key, meta["columns"], True) for key in keys}
    except CacheError:
        raise
    except Exception as exc:  # truncated .npy, bad JSON, missing file
        raise CacheError(f"{type(exc).__name__}: {exc}") from None


def clear(path: str | os.PathLike[str]) -> None:
    target, _ = entry_dir(path)
    shutil.rmtree(target, ignore_errors=True)

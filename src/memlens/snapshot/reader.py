"""Turn whatever the user hands us into the raw snapshot structure, safely.

Accepted: a path to a pickle (protocol 2-5, optionally gzip-compressed) or JSON file,
bytes, a dict from `torch.cuda.memory._snapshot()`, or the bare segment list of
`torch.cuda.memory_snapshot()`. The result is always a dict with `segments` and
`device_traces` (possibly empty) plus whatever optional keys were present.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlens.errors import SnapshotError
from memlens.snapshot.limits import LimitExceeded, Limits, limits_for, unlimited
from memlens.snapshot.safe_pickle import load_plain_pickle

GZIP_MAGIC = b"\x1f\x8b"
KNOWN_TOP_LEVEL = {
    "segments",
    "device_traces",
    "allocator_settings",
    "external_annotations",
    "traces",  # what torch.cuda._memory_viz wraps a bare segment list into
}


def read_source_limited(source: Any) -> tuple[Any, str, Limits]:
    """Return (raw object, human name, the limits for building from it). The limits are
    derived from the bytes actually read (decompressed), see memlens.snapshot.limits."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        name = str(path)
        if not path.exists():
            raise SnapshotError(f"{name}: no such file")
        if path.is_dir():
            raise SnapshotError(f"{name} is a directory, not a snapshot file")
        size = path.stat().st_size
        if size == 0:
            raise SnapshotError(f"{name} is empty (0 bytes)")
        with open(path, "rb") as fh:
            counter = _Counted(size)
            try:
                raw = _read_stream(fh, name, counter, size)
            except LimitExceeded as exc:
                raise exc.at(name) from None
            return raw, name, limits_for(counter.total)
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise SnapshotError("the data is empty (0 bytes)")
        counter = _Counted(len(data))
        raw = _read_stream(io.BytesIO(data), "data", counter, len(data))
        return raw, "<bytes>", limits_for(counter.total)
    if isinstance(source, (dict, list)):
        return source, "<in-memory snapshot>", unlimited()
    raise SnapshotError(
        f"cannot read a snapshot from a {type(source).__name__}; give a path, bytes, a dict "
        "from torch.cuda.memory._snapshot() or the list from torch.cuda.memory_snapshot()"
    )


class _Counted:
    """Bytes of the innermost (decompressed) stream: what the item limits derive from."""

    def __init__(self, total: int) -> None:
        self.total = total


class _BoundedGzip(io.RawIOBase):
    """A gzip stream that stops at the 'decompressed' limit (a 3 MB file can inflate to
    3 GiB; a stream is never read whole, so counting as it flows is enough)."""

    def __init__(self, gz: gzip.GzipFile, limit: int, counter: _Counted) -> None:
        self._gz = gz
        self._limit = limit
        self._counter = counter
        self._seen = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self._gz.readinto(b)
        self._seen += n
        self._counter.total = self._seen
        if self._limit and self._seen > self._limit:
            raise LimitExceeded("decompressed", self._limit, "inside the gzip stream")
        return n


MAX_GZIP_LAYERS = 2  # a file gzipped twice happens by accident; more is not a snapshot


def _read_stream(fh: Any, name: str, counter: _Counted, file_size: int, layers: int = 0) -> Any:
    head = fh.peek(2)[:2] if hasattr(fh, "peek") else b""
    if not head:
        head = fh.read(2)
        fh.seek(0)
    if head == GZIP_MAGIC:
        if layers >= MAX_GZIP_LAYERS:
            raise SnapshotError(f"{name}: gzip inside gzip inside gzip is not a snapshot")
        limit = limits_for(file_size).decompressed
        try:
            with gzip.GzipFile(fileobj=fh) as gz:
                inner = io.BufferedReader(_BoundedGzip(gz, limit, counter), buffer_size=1 << 20)
                return _read_stream(inner, f"{name} (gzip)", counter, file_size, layers + 1)
        except (OSError, EOFError, zlib.error) as exc:
            raise SnapshotError(f"{name}: gzip data is corrupt or truncated ({exc})") from None
    first = head[:1]
    if first in (b"{", b"[", b" ", b"\n", b"\r", b"\t"):
        return _read_json(fh, name)
    # the unpickler cannot be interrupted, so its memory is bounded instead; a stream's
    # size is unknown until read, so gzip gets the ratio the 'decompressed' limit allows
    expected = file_size if not layers else file_size * 10
    return load_plain_pickle(fh, what=name, memory_limit=limits_for(expected).memory)


def _read_json(fh: Any, name: str) -> Any:
    try:
        return json.load(io.TextIOWrapper(fh, encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{name} looks like JSON but is not valid JSON ({exc})") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise SnapshotError(f"{name}: JSON value out of range ({exc})") from None


def normalize_top_level(raw: Any, name: str, warn: Callable[[str, str], None]) -> dict[str, Any]:
    """Check the outer shape and return a dict with at least segments and device_traces."""
    if isinstance(raw, list):
        if raw and not all(
            isinstance(s, dict) and ("blocks" in s or "total_size" in s) for s in raw
        ):
            raise SnapshotError(
                f"{name} holds a list that is not a list of allocator segments, "
                "so it is not a memory snapshot"
            )
        return {"segments": raw, "device_traces": []}
    if not isinstance(raw, dict):
        raise SnapshotError(
            f"{name} holds a {type(raw).__name__}, not a memory snapshot "
            "(expected the dict written by torch.cuda.memory._dump_snapshot)"
        )
    if "segments" not in raw and "device_traces" not in raw:
        keys = ", ".join(sorted(map(str, raw))[:8]) or "none"
        raise SnapshotError(
            f"{name} is not a memory snapshot: it has neither 'segments' nor 'device_traces' "
            f"(its keys: {keys})"
        )
    out = dict(raw)
    if "device_traces" not in out:
        out["device_traces"] = out.get("traces") or []
    out.setdefault("segments", [])
    if not isinstance(out["segments"], list):
        raise SnapshotError(
            f"{name}: 'segments' should be a list, found {type(out['segments']).__name__}"
        )
    if not isinstance(out["device_traces"], list):
        raise SnapshotError(
            f"{name}: 'device_traces' should be a list of per-device lists, "
            f"found {type(out['device_traces']).__name__}"
        )
    unknown = sorted(str(k) for k in raw if k not in KNOWN_TOP_LEVEL)
    if unknown:
        warn("top-level", f"unknown top-level keys kept going past: {', '.join(unknown)}")
    return out

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
from pathlib import Path
from typing import Any

from memlens.errors import SnapshotError
from memlens.snapshot.safe_pickle import load_plain_pickle

GZIP_MAGIC = b"\x1f\x8b"
KNOWN_TOP_LEVEL = {
    "segments",
    "device_traces",
    "allocator_settings",
    "external_annotations",
    "traces",  # what torch.cuda._memory_viz wraps a bare segment list into
}


def read_source(source: Any) -> tuple[Any, str]:
    """Return (raw object, human name of the source)."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        name = str(path)
        if not path.exists():
            raise SnapshotError(f"{name}: no such file")
        if path.is_dir():
            raise SnapshotError(f"{name} is a directory, not a snapshot file")
        if path.stat().st_size == 0:
            raise SnapshotError(f"{name} is empty (0 bytes)")
        with open(path, "rb") as fh:
            return _read_stream(fh, name), name
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        if not data:
            raise SnapshotError("the data is empty (0 bytes)")
        return _read_stream(io.BytesIO(data), "data"), "<bytes>"
    if isinstance(source, (dict, list)):
        return source, "<in-memory snapshot>"
    raise SnapshotError(
        f"cannot read a snapshot from a {type(source).__name__}; give a path, bytes, a dict "
        "from torch.cuda.memory._snapshot() or the list from torch.cuda.memory_snapshot()"
    )


def _read_stream(fh: io.BufferedIOBase, name: str) -> Any:
    head = fh.peek(2)[:2] if hasattr(fh, "peek") else b""
    if not head:
        head = fh.read(2)
        fh.seek(0)
    if head == GZIP_MAGIC:
        try:
            with gzip.GzipFile(fileobj=fh) as gz:
                inner = io.BufferedReader(gz, buffer_size=1 << 20)  # type: ignore[arg-type]
                return _read_stream(inner, f"{name} (gzip)")
        except (OSError, EOFError) as exc:
            raise SnapshotError(f"{name}: gzip data is corrupt or truncated ({exc})") from None
    first = head[:1]
    if first in (b"{", b"[", b" ", b"\n", b"\r", b"\t"):
        return _read_json(fh, name)
    return load_plain_pickle(fh, what=name)


def _read_json(fh: io.BufferedIOBase, name: str) -> Any:
    try:
        return json.load(io.TextIOWrapper(fh, encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{name} looks like JSON but is not valid JSON ({exc})") from None


def normalize_top_level(raw: Any, name: str, warn) -> dict[str, Any]:
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

"""Turn whatever the user hands us into the raw snapshot structure, safely.

Accepted: a path to a pickle (protocol 2-5, optionally gzip-compressed) or JSON file,
bytes, a dict from `torch.cuda.memory._snapshot()`, or the bare segment list of
`torch.cuda.memory_snapshot()`. The result is always a dict with `segments` and
`device_traces` (possibly empty) plus whatever optional keys were present.
"""

from __future__ import annotations

import contextlib
import io
import json
import mmap
import os
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from memlens.errors import SnapshotError
from memlens.snapshot.limits import LimitExceeded, Limits, limits_for, unlimited
from memlens.snapshot.read import prescan
from memlens.snapshot.read.safe_pickle import load_plain_pickle
from memlens.snapshot.read.sniff import refuse_non_pickle

GZIP_MAGIC = b"\x1f\x8b"
# what a JSON snapshot starts with; anything else must be a pickle
JSON_STARTS = (b"{", b"[", b" ", b"\n", b"\r", b"\t")
KNOWN_TOP_LEVEL = {
    "segments",
    "device_traces",
    "allocator_settings",
    "external_annotations",
    "traces",  # what torch.cuda._memory_viz wraps a bare segment list into
    "memlens_simulation",  # a simulated snapshot's stated assumptions (--routing)
}


def read_source_limited(source: Any) -> tuple[Any, str, Limits]:
    """Return (raw object, human name, the limits for building from it). The limits are
    derived from the bytes actually read (decompressed), see memlens.snapshot.limits."""
    if isinstance(source, (str, os.PathLike)):
        name = str(source)
        with open_data(Path(source)) as (data, what, memory_limit):
            return _parse(data, what, memory_limit), name, limits_for(len(data))
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = bytes(source)
        if not raw:
            raise SnapshotError("the data is empty (0 bytes)")
        data, layers = inflated(raw, "data", len(raw))
        what = "data" + " (gzip)" * layers
        limit = limits_for(len(raw) * GZIP_RATIO if layers else len(raw)).memory
        return _parse(data, what, limit), "<bytes>", limits_for(len(data))
    if isinstance(source, (dict, list)):
        return source, "<in-memory snapshot>", unlimited()
    raise SnapshotError(
        f"cannot read a snapshot from a {type(source).__name__}; give a path, bytes, a dict "
        "from torch.cuda.memory._snapshot() or the list from torch.cuda.memory_snapshot()"
    )


# pickled snapshots compress 5-30x: a gzip stream's 'memory' limit is that of the file it
# would be at 30x (the estimate is 9-14 x a real snapshot's pickle: docs/security.md)
GZIP_RATIO = 30


@contextlib.contextmanager
def open_data(path: Path) -> Iterator[tuple[Any, str, int]]:
    """The bytes of a snapshot file, decompressed, for either reader: (data, the name to
    give in errors, the 'memory' limit both readers apply). A plain file is mapped, not
    read; a gzip stream is inflated within the 'decompressed' limit, by the one function
    both readers use, so a cut trailer or bytes after the stream mean the same to both."""
    name = str(path)
    if not path.exists():
        raise SnapshotError(f"{name}: no such file")
    if path.is_dir():
        raise SnapshotError(f"{name} is a directory, not a snapshot file")
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise SnapshotError(f"{name} is empty (0 bytes)")
        try:
            mapped = _map(fh.fileno())
        except (OSError, ValueError):  # not mappable (a pipe, some file systems): read it
            mapped = None
        try:
            data, layers = inflated(mapped if mapped is not None else fh.read(), name, size)
            # a stream's size is unknown until inflated, so both readers give a gzip
            # stream the 'memory' limit of a file GZIP_RATIO times its size
            limit = limits_for(size * GZIP_RATIO if layers else size).memory
            yield data, name + " (gzip)" * layers, limit
        finally:
            if mapped is not None:
                with contextlib.suppress(BufferError):  # a view still held: the GC closes it
                    mapped.close()


def _map(fd: int) -> mmap.mmap:
    """The file mapped read-only and shared. Not populated: the compiled reader gives the
    pages it has passed back as it goes (peak RSS), and populating all of them first saved
    no CPU (docs/benchmarks.md, issue 27's section)."""
    if not hasattr(mmap, "MAP_SHARED"):  # Windows
        return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)


MAX_GZIP_LAYERS = 2  # a file gzipped twice happens by accident; more is not a snapshot
_INFLATE_STEP = 16 << 20


def inflated(data: Any, name: str, file_size: int) -> tuple[Any, int]:
    """`data` with its gzip layers (at most two) removed, and how many there were. Rules
    (docs/security.md): a stream may hold several members, read one after the other, and
    end in zero bytes (as the gzip module reads them); anything else after a member, a
    member cut before its trailer and a wrong CRC or length are errors. The output stops
    at the 'decompressed' limit: nothing is inflated past it."""
    layers = 0
    while data[:2] == GZIP_MAGIC:
        if layers >= MAX_GZIP_LAYERS:
            raise SnapshotError(f"{name}: gzip inside gzip inside gzip is not a snapshot")
        data = _inflate(data, name, limits_for(file_size).decompressed)
        layers += 1
    return data, layers


def _inflate(data: Any, name: str, limit: int) -> bytes:
    pieces: list[bytes] = []
    total = 0
    rest = memoryview(data)
    try:
        while True:  # one gzip member a turn
            d = zlib.decompressobj(wbits=31)
            while not d.eof:
                piece = d.decompress(rest, _INFLATE_STEP)
                rest = memoryview(d.unconsumed_tail)
                total += len(piece)
                if limit and total > limit:
                    raise LimitExceeded("decompressed", limit, "inside the gzip stream").at(name)
                pieces.append(piece)
                if not piece and not rest:
                    raise SnapshotError(
                        f"{name}: gzip data is corrupt or truncated (the stream ends before "
                        "its end marker)"
                    )
            rest = memoryview(d.unused_data) if d.unused_data else rest[len(rest) :]
            if not rest or not any(rest):  # the end, or zero padding
                break
            if rest[:2] != GZIP_MAGIC:
                raise SnapshotError(
                    f"{name}: gzip data is corrupt or truncated (bytes after the gzip stream)"
                )
    except zlib.error as exc:
        raise SnapshotError(f"{name}: gzip data is corrupt or truncated ({exc})") from None
    return b"".join(pieces)


def _parse(data: Any, what: str, memory_limit: int) -> Any:
    first = bytes(data[:1])
    if first in JSON_STARTS:
        return _read_json(data, what)
    refuse_non_pickle(data, what)
    # the unpickler cannot be interrupted: its memory is bounded by a scan first (any
    # thread), and by the address space too where that is possible (a lone thread)
    memo_limit = limits_for(len(data)).memo
    prescan.check(data, what=what, memory_limit=memory_limit, memo_limit=memo_limit)
    return load_plain_pickle(io.BytesIO(data), what=what, memory_limit=memory_limit)


def _read_json(data: Any, name: str) -> Any:
    try:
        return json.loads(bytes(data).decode("utf-8"))
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

"""SQL over the columnar model with DuckDB (memlens[sql]).

The numpy columns are wrapped as Arrow arrays (zero-copy for numeric columns of a
single-device snapshot; several devices are concatenated once) and registered as DuckDB
views, so DuckDB scans them in place. Tables (docs/sql.md has every column):

    events, allocations, frames, stacks (stack_id, depth, frame_id), segments, blocks,
    annotations, strings, stack_frames (stacks joined with frames, for convenience), and
    for the common questions allocation_sites, live_at(device, event) and free_gaps

Action names, frame kinds, block states and annotation stages are dictionary-encoded
strings (no per-row Python objects).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from memlens.analysis.results import QueryResult
from memlens.analysis.sites import frame_label, user_frame_of_stacks
from memlens.errors import MemlensError
from memlens.snapshot.actions import BLOCK_STATE_NAMES, KNOWN_ACTIONS
from memlens.snapshot.model import (
    GHOST,
    LIVE_AT_END,
    OVERWRITTEN,
    PENDING_FREE,
    PREEXISTING,
    Snapshot,
)

TABLES = (
    "events",
    "allocations",
    "frames",
    "stacks",
    "stack_frames",
    "segments",
    "blocks",
    "annotations",
    "strings",
)


def _libs() -> tuple[Any, Any]:
    try:
        import duckdb
        import pyarrow as pa
    except ImportError:
        raise MemlensError("SQL needs DuckDB and PyArrow: pip install 'memlens[sql]'") from None
    return duckdb, pa


def _dict(pa: Any, codes: np.ndarray, names: list[str]) -> Any:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(names))


def _nullable(pa: Any, values: np.ndarray, null_below: int = 0) -> Any:
    return pa.array(values, mask=values < null_below)


def _cat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    if len(parts) == 1:
        return parts[0]  # one device: no copy
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _utf8(values: list[str]) -> list[str]:
    """Arrow and DuckDB hold UTF-8 only, and a pickle may hold a lone surrogate (a name
    from a file is whatever it says): such a character is carried as its escape (\\ud800),
    as the text views show it, instead of failing the whole table."""
    return [
        v if v.isascii() or not _SURROGATE.search(v) else _SURROGATE.sub(_escape, v) for v in values
    ]


def _escape(m: re.Match[str]) -> str:
    return f"\\u{ord(m.group()):04x}"


def arrow_tables(snap: Snapshot) -> dict[str, Any]:
    """The snapshot's tables as pyarrow Tables (what `connect` registers)."""
    _, pa = _libs()
    devs = [snap.traces[d] for d in sorted(snap.traces)]
    streams = np.asarray(snap.streams, dtype=np.int64)
    action_names = [""] * (16 + len(snap.action_names))
    for k, v in KNOWN_ACTIONS.items():
        action_names[v] = k
    for i, nme in enumerate(snap.action_names):
        action_names[16 + i] = nme
    action_names = _utf8([a or f"action_{i}" for i, a in enumerate(action_names)])

    def col(attr: str, dtype: Any = np.int64) -> np.ndarray:
        return _cat([getattr(d, attr) for d in devs], dtype)

    n_ev = [d.n_events for d in devs]
    n_al = [d.n_allocations for d in devs]
    ev_device = _cat([np.full(n, d.device, np.int32) for n, d in zip(n_ev, devs)], np.int32)
    ev_idx = _cat([np.arange(n, dtype=np.int64) for n in n_ev], np.int64)
    events = pa.table({
        "device": ev_device, "idx": ev_idx,
        "action": _dict(pa, col("action", np.uint8), action_names),
        "addr": col("addr", np.uint64), "size": col("size"),
        "stream": streams[col("stream", np.int32)] if len(streams) else col("stream", np.int32),
        "time_us": _nullable(pa, col("time_us")),
        "stack_id": _nullable(pa, col("stack", np.int32)),
        "compile_context_id": _nullable(pa, col("compile_context", np.int32)),
        "user_metadata_id": _nullable(pa, col("user_metadata", np.int32)),
        "forward_stack_id": _nullable(pa, col("forward_stack", np.int32)),
        "version": _nullable(pa, col("version", np.int32)),
        "alloc_row": _nullable(pa, col("alloc_row", np.int32)),
        "active_after": col("active_after"), "reserved_after": col("reserved_after"),
        **_pool_columns(pa, snap, col("pool", np.int16)),
    })  # fmt: skip
    flags = col("alloc_flags", np.uint8)
    n_per = _cat([np.full(k, d.n_events, np.int64) for k, d in zip(n_al, devs)], np.int64)
    free_ev = col("free_event")
    allocations = pa.table({
        "device": _cat([np.full(k, d.device, np.int32) for k, d in zip(n_al, devs)], np.int32),
        "row": _cat([np.arange(k, dtype=np.int64) for k in n_al], np.int64),
        "alloc_event": _nullable(pa, col("alloc_event")),
        "free_requested_event": _nullable(pa, col("free_requested_event")),
        "free_event": pa.array(free_ev, mask=free_ev >= n_per),
        "addr": col("alloc_addr", np.uint64), "version": col("alloc_version", np.int32),
        "size": col("alloc_size"), "stack_id": _nullable(pa, col("alloc_stack", np.int32)),
        "stream": streams[col("alloc_stream", np.int32)] if len(streams) else col("alloc_stream", np.int32),
        "flags": flags,
        "preexisting": (flags & PREEXISTING) != 0, "ghost": (flags & GHOST) != 0,
        "live_at_end": (flags & LIVE_AT_END) != 0, "pending_free": (flags & PENDING_FREE) != 0,
        "overwritten": (flags & OVERWRITTEN) != 0,
        **_pool_columns(pa, snap, _alloc_pools(devs)),
    })  # fmt: skip
    f = snap.frames
    frames = pa.table({
        "frame_id": np.arange(len(f), dtype=np.int32),
        "filename_id": f.filename, "line": f.line, "name_id": f.name,
        "kind": _dict(pa, f.kind, ["python", "cpp", "noise"]),
    })  # fmt: skip
    st = snap.stacks
    counts = np.diff(st.offsets)
    sid = np.repeat(np.arange(len(st), dtype=np.int32), counts)
    depth = np.arange(len(st.frame_ids), dtype=np.int64) - np.repeat(st.offsets[:-1], counts)
    stacks = pa.table({"stack_id": sid, "depth": depth.astype(np.int32), "frame_id": st.frame_ids})
    sg = snap.segments
    segments = pa.table({
        "segment_id": np.arange(len(sg), dtype=np.int32), "device": sg.device,
        "address": sg.address, "total_size": sg.total_size, "allocated_size": sg.allocated_size,
        "active_size": sg.active_size, "requested_size": sg.requested_size,
        "stream": streams[sg.stream] if len(streams) else sg.stream,
        "segment_type": _dict(pa, (~sg.is_large).astype(np.int32), ["large", "small"]),
        "pool_id0": sg.pool_id0, "pool_id1": sg.pool_id1, "is_expandable": sg.is_expandable,
        "stack_id": _nullable(pa, sg.stack),
    })  # fmt: skip
    blocks = pa.table({
        "block_id": np.arange(len(sg.block_address), dtype=np.int64),
        "segment_id": sg.block_segment.astype(np.int32),
        "address": sg.block_address, "size": sg.block_size,
        "requested_size": sg.block_requested_size,
        "state": _dict(pa, sg.block_state, list(BLOCK_STATE_NAMES)),
        "stack_id": _nullable(pa, sg.block_stack),
    })  # fmt: skip
    an = snap.annotations
    annotations = pa.table({
        "idx": np.arange(len(an), dtype=np.int64), "name_id": an.name,
        "stage": _dict(pa, np.where(an.stage < 0, 2, an.stage), ["START", "END", "OTHER"]),
        "device": an.device, "time_us": an.time_us,
    })  # fmt: skip
    strings = pa.table({"id": np.arange(len(snap.strings), dtype=np.int32),
                        "value": pa.array(_utf8(snap.strings), type=pa.string())})  # fmt: skip
    site_frames = user_frame_of_stacks(snap)
    labels = {int(f): frame_label(snap, int(f)) for f in np.unique(site_frames).tolist()}
    stack_sites = pa.table({
        "stack_id": np.arange(len(site_frames), dtype=np.int32),
        "site": pa.array(_utf8([labels[int(f)] for f in site_frames.tolist()]), type=pa.string()),
    })  # fmt: skip
    return {
        "events": events,
        "allocations": allocations,
        "_frames": frames,
        "stacks": stacks,
        "segments": segments,
        "blocks": blocks,
        "_annotations": annotations,
        "strings": strings,
        "_stack_sites": stack_sites,
    }


def _pool_columns(pa: Any, snap: Snapshot, index: np.ndarray) -> dict[str, Any]:
    """pool_id0, pool_id1 (NULL where the entry names no pool) from indexes into
    Snapshot.pools (-1: none), as the segments table spells a pool."""
    pools = np.asarray(snap.pools, dtype=np.int64).reshape(-1, 2)
    k = np.asarray(index, dtype=np.int64)
    none = k < 0
    pairs = pools[np.maximum(k, 0)] if len(pools) else np.zeros((len(k), 2), dtype=np.int64)
    return {
        "pool_id0": pa.array(pairs[:, 0], mask=none),
        "pool_id1": pa.array(pairs[:, 1], mask=none),
    }


def _alloc_pools(devs: list[Any]) -> np.ndarray:
    """Per allocation row, the pool index its alloc entry names (-1: made before the trace,
    or a trace without pool_id)."""
    parts = []
    for d in devs:
        ev = np.asarray(d.alloc_event, dtype=np.int64)
        k = np.full(len(ev), -1, dtype=np.int64)
        inside = ev >= 0
        k[inside] = d.pool[ev[inside]]
        parts.append(k)
    return _cat(parts, np.int64)


# A query over an untrusted snapshot's tables should not be able to read or write files,
# reach the network or load code: DuckDB can do all three (read_csv('/etc/passwd'),
# COPY ... TO, INSTALL/LOAD, http URLs) unless told otherwise. `allow_files` opts in to
# files and already-installed extensions; nothing is ever downloaded.
SANDBOX = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
}
# with files: extensions already installed may be LOADed, never downloaded (no autoload,
# no autoinstall, an extension repository that does not exist, INSTALL refused by `query`)
WITH_FILES = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "custom_extension_repository": "/nonexistent/memlens-downloads-nothing",
}
NO_FILES_HINT = (
    " (memlens sql runs without file, network or extension access; "
    "--allow-files lets a query read and write files)"
)


def connect(snap: Snapshot, *, allow_files: bool = False) -> Any:
    """A DuckDB connection with the snapshot's tables registered (needs memlens[sql]).
    Sandboxed (no files, network or extensions, configuration locked) unless
    `allow_files`."""
    duckdb, _ = _libs()
    con = duckdb.connect(":memory:", config=dict(WITH_FILES if allow_files else SANDBOX))
    for name, table in arrow_tables(snap).items():
        con.register(name, table)
    # names resolved from the string table, so users never join `strings` by hand
    con.execute(
        "CREATE VIEW frames AS SELECT f.frame_id, fs.value AS filename, f.line, ns.value AS name, "
        "f.kind FROM _frames f JOIN strings fs ON fs.id = f.filename_id "
        "JOIN strings ns ON ns.id = f.name_id"
    )
    con.execute(
        "CREATE VIEW annotations AS SELECT a.idx, s.value AS name, a.stage, a.device, a.time_us "
        "FROM _annotations a JOIN strings s ON s.id = a.name_id ORDER BY a.idx"
    )
    con.execute(
        "CREATE VIEW stack_frames AS SELECT s.stack_id, s.depth, f.* EXCLUDE (frame_id), "
        "s.frame_id FROM stacks s JOIN frames f USING (frame_id)"
    )
    for statement in VIEWS:
        con.execute(statement)
    con.execute("SET lock_configuration = true")  # a query cannot undo the sandbox
    return con


# the common questions as views and table macros (docs/sql.md)
VIEWS = (
    # every allocation with its call site (analysis.sites: the first user frame)
    "CREATE VIEW allocation_sites AS SELECT a.*, coalesce(s.site, '<no stack recorded>') AS "
    "site FROM allocations a LEFT JOIN _stack_sites s USING (stack_id)",
    # live right after event `ev` of device `dev` (-1: before the first), with call sites
    "CREATE MACRO live_at(dev, ev) AS TABLE SELECT * FROM allocation_sites WHERE device = dev "
    "AND coalesce(alloc_event, -1) <= ev AND (free_event IS NULL OR free_event > ev) "
    "ORDER BY size DESC, row",
    # the allocator's free gaps at the end: inactive blocks, with their segment
    "CREATE VIEW free_gaps AS SELECT b.block_id, b.segment_id, s.device, b.address, b.size, "
    "s.stream, s.pool_id0, s.pool_id1, s.segment_type, s.is_expandable FROM blocks b "
    "JOIN segments s USING (segment_id) WHERE b.state = 'inactive' "
    "ORDER BY b.size DESC, b.address",
)

# `memlens sql --tables`: each table and its columns
TABLES_QUERY = (
    "select table_name, string_agg(column_name || ' ' || data_type, ', ' order by ordinal_position) "
    "as columns from information_schema.columns where table_name not like '\\_%' escape '\\' "
    "group by 1 order by 1"
)


def plain(v: Any) -> Any:
    """A DuckDB value as JSON-able: HUGEINT is already an int; DECIMAL -> float; lists,
    structs and maps element by element; anything else (dates, UUIDs, blobs) -> str."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    from decimal import Decimal

    if isinstance(v, Decimal):
        return float(v)
    return str(v)


_LOAD = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*load\b", re.IGNORECASE | re.DOTALL)


def _refuse_downloads(duckdb: Any, con: Any, sql: str) -> None:
    """With files allowed DuckDB may reach the network, and INSTALL ... FROM 'url' or
    UPDATE EXTENSIONS would download code: only LOAD (of what is installed) goes through."""
    try:
        kinds = [(st.type, st.query) for st in con.extract_statements(sql)]
    except duckdb.Error as exc:
        raise MemlensError("SQL: " + " ".join(str(exc).split())) from None
    except ValueError:  # a statement type the Python API does not name (UPDATE EXTENSIONS)
        kinds = None
    if kinds is None or any(
        kind == duckdb.StatementType.LOAD and not _LOAD.match(text) for kind, text in kinds
    ):
        raise MemlensError(
            "SQL: installing or updating extensions is refused: memlens never downloads "
            "anything (--allow-files loads extensions that are already installed)"
        )


def query(
    snap: Snapshot, sql: str, *, top: int | None = None, allow_files: bool = False, **old: Any
) -> QueryResult:
    """Run `sql`: {"columns": [...], "types": [...], "rows": [[...], ...] (JSON-able values,
    see `plain`), "truncated": bool}, the first `top` rows (`limit=`: its deprecated
    name). MemlensError (one line) on a SQL error."""
    limit = _top(top, old)
    duckdb, _ = _libs()
    con = connect(snap, allow_files=allow_files)
    if allow_files:
        _refuse_downloads(duckdb, con, sql)
    try:
        cur = con.execute(sql)
        if cur.description is None:
            return {"columns": [], "types": [], "rows": [], "truncated": False}
        rows = cur.fetchmany(limit + 1) if limit is not None else cur.fetchall()
    except duckdb.Error as exc:
        hint = NO_FILES_HINT if isinstance(exc, duckdb.PermissionException) else ""
        raise MemlensError("SQL: " + " ".join(str(exc).split()) + hint) from None
    truncated = limit is not None and len(rows) > limit
    rows = rows[:limit] if truncated else rows
    return {
        "columns": [d[0] for d in cur.description],
        "types": [str(d[1]) for d in cur.description],
        "rows": [[plain(v) for v in r] for r in rows],
        "truncated": truncated,
    }


def _top(top: int | None, old: dict[str, Any]) -> int | None:
    """`limit=` was the other name of "how many rows"; it still works, with a warning."""
    if set(old) - {"limit"}:
        raise TypeError(f"query() got unexpected keyword(s) {', '.join(set(old) - {'limit'})}")
    if "limit" in old:
        import warnings

        warnings.warn("query(limit=) is deprecated, use top=", DeprecationWarning, stacklevel=3)
        return old["limit"] if top is None else top
    return top

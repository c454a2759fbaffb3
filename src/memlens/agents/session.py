"""The snapshots an MCP server keeps open between tool calls, and which files it may read.

An agent opens a snapshot once (`open_snapshot`) and asks many questions of it: the
loaded columns stay here (and in the column cache on disk, as for the CLI), so the second
question costs no load. A snapshot is named by the id `open_snapshot` gave (`s1`) or by
its path (opened on first use). If the file changed since it was opened, it is read again.
At most `max_open` stay open; the least recently used one is closed first.

The server reads only files the agent names in a tool call, and with `roots` only those
under one of these folders. Every path is checked after expansion: a glob's matches and a
folder's files one by one, each resolved (symbolic links followed, `..` applied) before it
is compared with the roots, and the resolved path is what is read, so a link swapped in
later is not followed. A refusal quotes the name as the agent gave it, never a byte of
the file.

Calls may run at once (server.py): `_guard` covers the open snapshots, and one load per
file runs at a time, so a second call for a file that is loading waits and shares it.
"""

from __future__ import annotations

import os
import shlex
import tempfile
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError
from memlens.snapshot.input_path import check_input, check_name, shown
from memlens.snapshot.model import Snapshot


@dataclass
class Opened:
    id: str
    path: Path
    stat: tuple[int, int]  # (mtime_ns, size) when read: a change means read it again
    snapshot: Snapshot
    warnings: list[str]

    def describe(self) -> dict[str, Any]:
        """What `open_snapshot` answers: enough to choose a device and the next question."""
        snap = self.snapshot
        return {
            "snapshot": self.id,
            "path": str(self.path),
            "devices": [
                {"device": d, "trace_entries": t.n_events, "allocations": t.n_allocations}
                for d, t in sorted(snap.traces.items())
            ],
            "default_device": snap.default_device,
            "annotations": len(snap.annotations.name),
            "from_cache": snap.from_cache,
            "warnings": self.warnings,
        }


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_size)


class Session:
    def __init__(
        self, roots: list[Path] | None = None, *, cache: bool = True, max_open: int = 4
    ) -> None:
        self.roots = [r.resolve() for r in roots or []]
        self.cache = cache
        self.max_open = max(1, max_open)
        self.opened: OrderedDict[str, Opened] = OrderedDict()  # id -> entry, oldest first
        self._count = 0
        self._guard = threading.Lock()  # `opened` and `_count`
        self._loading: dict[Path, threading.Lock] = {}  # one load per file at a time
        # the server's own folder for what its tools write (simulate's snapshots): readable
        # like the roots, made at the first write
        self._scratch: Path | None = None
        # each call's thread: where its progress lines go (the server's notifications)
        self._reporter = threading.local()

    def scratch_file(self, name: str) -> Path:
        """A new file's path in the server's scratch folder (a fresh temporary folder)."""
        with self._guard:
            if self._scratch is None:
                self._scratch = Path(tempfile.mkdtemp(prefix="memlens-mcp-")).resolve()
            stem, _, suffix = name.rpartition(".")
            fd, path = tempfile.mkstemp(prefix=f"{stem}-", suffix=f".{suffix}", dir=self._scratch)
        os.close(fd)
        return Path(path)

    @contextmanager
    def reporting(self, report: Callable[[str], None] | None) -> Iterator[None]:
        """Progress lines of the calling thread's tool go to `report` while in the block."""
        self._reporter.report = report
        try:
            yield
        finally:
            self._reporter.report = None

    def report(self, line: str) -> None:
        """A progress line of the running call (nothing when its client asked for none)."""
        report = getattr(self._reporter, "report", None)
        if report is not None:
            report(line)

    def allowed(self, path: str, *, what: str | None = None) -> Path:
        """`path` resolved (links followed), if this server may read it; `what` names it in
        a refusal (default: the path as given)."""
        if not isinstance(path, str) or not path:
            raise MemlensError("give a snapshot as the path of a file or an id from open_snapshot")
        check_name(path)
        try:
            resolved = Path(os.path.expanduser(path)).resolve()
        except (OSError, RuntimeError) as exc:  # a loop of links (RuntimeError before 3.13)
            raise MemlensError(f"{shown(path)}: cannot resolve it: {exc}") from None
        own = self._scratch is not None and resolved.is_relative_to(self._scratch)
        if self.roots and not own and not any(resolved.is_relative_to(r) for r in self.roots):
            where = ", ".join(map(str, self.roots))
            name = what or shown(path)
            raise MemlensError(f"{name}: outside the folders this server may read ({where})")
        return resolved

    def allowed_script(self, script: str) -> str:
        """`script` ('SCRIPT ARGS', advise's option) with the script's path resolved, if it
        is under the roots and so is the folder it would run in (this server's)."""
        from memlens.planning.verify import split_script

        path, args = split_script(script)
        resolved = self.allowed(path)
        self.allowed(os.getcwd(), what=f"the folder the script would run in ({os.getcwd()})")
        check_input(str(resolved), given=path)
        if not resolved.is_file():
            raise MemlensError(f"script: no such script: {shown(path)}")
        return shlex.join([str(resolved), *args])

    def expand(self, paths: list[Any]) -> tuple[str, ...]:
        """fleet's files, directories and globs expanded (fleet.naming), each file then
        resolved and checked against the roots: a glob through `..` or a link in a listed
        folder cannot reach out. The resolved paths are what fleet reads."""
        from memlens.fleet.naming import GLOB_CHARS, expand_paths

        if not all(isinstance(p, str) and p for p in paths):
            raise MemlensError("paths: each a file, a directory or a glob")
        out: dict[str, None] = {}  # resolved, in the order found, each once
        for p in paths:
            # the folder or the glob's fixed part first: nothing outside the roots is listed
            self.allowed(GLOB_CHARS.split(p, maxsplit=1)[0] or ".", what=shown(p))
            for f in expand_paths([os.path.expanduser(p)]):
                # a match is named by the pattern the agent gave, not by what it found
                resolved = self.allowed(f, what=f"{shown(p)} (a file it names)")
                check_input(str(resolved), given=f)
                out.setdefault(str(resolved), None)
        return tuple(out)

    def open(self, ref: str) -> Opened:
        """The open snapshot `ref` (an id or a path), read now if it is not open or changed."""
        with self._guard:
            entry = self.opened.get(ref)
        path = entry.path if entry is not None else self.allowed(ref)
        with self._guard:
            gate = self._loading.setdefault(path, threading.Lock())
        with gate:  # a second call for this file waits for the first's load, then shares it
            with self._guard:
                entry = next((e for e in self.opened.values() if e.path == path), None)
            check_input(str(path), given=ref)
            if not path.is_file():
                raise MemlensError(f"{shown(ref)}: no such file")
            stat = _stat(path)
            if entry is None or entry.stat != stat:
                entry = self._read(path, stat, entry.id if entry is not None else None)
        with self._guard:
            self.opened[entry.id] = entry
            self.opened.move_to_end(entry.id)
            while len(self.opened) > self.max_open:
                self.opened.popitem(last=False)
        return entry

    def close(self, ref: str) -> bool:
        path = None if ref in self.opened else self.allowed(ref)
        with self._guard:
            entry = self.opened.pop(ref, None)
            if entry is None:
                entry = next((e for e in self.opened.values() if e.path == path), None)
                if entry is not None:
                    del self.opened[entry.id]
        return entry is not None

    def listed(self) -> list[Opened]:
        with self._guard:
            return list(self.opened.values())

    def _read(self, path: Path, stat: tuple[int, int], id: str | None) -> Opened:
        from memlens.snapshot.loader import SnapshotWarning, load

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SnapshotWarning)
            snap = load(str(path), cache=self.cache)
        notes = [str(w.message) for w in caught if issubclass(w.category, SnapshotWarning)]
        if id is None:
            with self._guard:
                self._count += 1
                id = f"s{self._count}"
        return Opened(id, path, stat, snap, notes)

    def load(self, ref: str) -> Snapshot:
        """The host's loader of the registry's `open`: the snapshot of an id or a path."""
        return self.open(ref).snapshot

    def paths(self, opens: str, args: dict[str, Any]) -> Any:
        """The snapshot(s) a tool's arguments name, as the command line's SNAPSHOT
        argument(s) would give them (a path; two for "pair"; a tuple for "many" and
        "paths"), each opened (checked, read and kept) but for "paths": those the
        command's body or its workers read, and the server only checks they are allowed."""
        if opens == "paths":
            paths = args.get("paths")
            if not isinstance(paths, list) or not paths:
                raise MemlensError("give paths: a list of files, directories or globs")
            return self.expand(paths)
        if opens == "many":
            refs = args.get("snapshots")
            if not isinstance(refs, list) or not refs or not all(isinstance(r, str) for r in refs):
                raise MemlensError("give snapshots: a list of ids or paths, one per rank")
            return tuple(str(self.open(r).path) for r in refs)
        a = str(self.open(_required(args, "snapshot")).path)
        return (a, str(self.open(_required(args, "snapshot_b")).path)) if opens == "pair" else a


def _required(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value:
        raise MemlensError(f"give {name}: an id from open_snapshot or the path of a snapshot")
    return value

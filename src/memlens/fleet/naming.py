"""Which files are the ranks, and which rank each one is.

Paths may be files, directories (their snapshot files, not recursive) or glob patterns.
The rank id comes from the file name ("rank12", "rank_12", "..._12.pickle"), the same rule
for every file; when that fails (no number, or two files with one id) the ranks are
numbered in the order given. `rank_regex` overrides: its first group (or the whole match)
must be a number in every file name.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Sequence
from pathlib import Path

from memlens.errors import MemlensError

SNAPSHOT_SUFFIXES = (".pickle", ".pkl", ".pickle.gz", ".pkl.gz", ".json", ".json.gz")
# tried in turn; the first that names every file with distinct ids wins
RANK_PATTERNS = (
    r"rank[_\-.]?(\d+)",
    r"[_\-.](\d+)\.(?:pickle|pkl|json)(?:\.gz)?$",
)
GLOB_CHARS = re.compile(r"[*?\[]")  # a path with one is a glob (unless it exists)


def natural_key(text: str) -> list[object]:
    """ "rank2" before "rank10"."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Files in the order given (a directory or a glob in natural order), each once. A
    name that does not exist is kept: it becomes a failed row, like an unreadable file."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = [
                str(f)
                for f in Path(p).iterdir()
                if f.is_file() and f.name.endswith(SNAPSHOT_SUFFIXES)
            ]
            if not found:
                raise MemlensError(f"no snapshot files ({', '.join(SNAPSHOT_SUFFIXES)}) in {p}")
            out.extend(sorted(found, key=natural_key))
        elif GLOB_CHARS.search(p) and not os.path.exists(p):
            found = [f for f in glob.glob(p) if os.path.isfile(f)]
            if not found:
                raise MemlensError(f"no file matches {p}")
            out.extend(sorted(found, key=natural_key))
        else:
            out.append(p)
    seen: set[str] = set()
    unique = []
    for p in out:
        key = os.path.abspath(p)
        if key not in seen:
            seen.add(key)
            unique.append(p)
    if not unique:
        raise MemlensError("no snapshot files given")
    return unique


def _ids(paths: Sequence[str], rx: re.Pattern[str]) -> list[int] | None:
    ids = []
    for p in paths:
        m = rx.search(os.path.basename(p))
        if m is None:
            return None
        text = m.group(1) if rx.groups else m.group(0)
        if not text.isdigit():
            return None
        ids.append(int(text))
    return ids if len(set(ids)) == len(ids) else None


def rank_ids(paths: Sequence[str], rank_regex: str | None = None) -> tuple[list[int], str]:
    """(rank id per path, how they were found: "file name", "--rank-regex" or "order")."""
    if rank_regex is not None:
        try:
            rx = re.compile(rank_regex)
        except re.error as exc:
            raise MemlensError(f"--rank-regex {rank_regex!r}: {exc}") from None
        ids = _ids(paths, rx)
        if ids is None:
            raise MemlensError(
                f"--rank-regex {rank_regex!r} must find a number, a different one, in "
                "every file name"
            )
        return ids, "--rank-regex"
    for pattern in RANK_PATTERNS:
        ids = _ids(paths, re.compile(pattern, re.IGNORECASE))
        if ids is not None:
            return ids, "file name"
    return list(range(len(paths))), "order"

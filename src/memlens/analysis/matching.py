"""Regular expressions over frames, evaluated once per distinct string and reduced per
stack with numpy (a million events share a few thousand stacks and frames).

A frame's text is "filename:line:name", as PyTorch's viewer prints it. Also the one
machine-independent name of a call site (site_key) that every comparison matches on: diff,
the viewer's and the TUI's compare, fleet's fingerprints.
"""

from __future__ import annotations

import posixpath
import re

import numpy as np

from memlens.analysis.events import memo
from memlens.analysis.sites import NO_STACK_LABEL
from memlens.snapshot.frames import PYTHON, short_cpp_name
from memlens.snapshot.model import Snapshot


def frame_texts(snap: Snapshot) -> list[str]:
    def make() -> list[str]:
        f, s = snap.frames, snap.strings
        return [
            f"{s[a]}:{int(b)}:{s[c]}"
            for a, b, c in zip(f.filename.tolist(), f.line.tolist(), f.name.tolist())
        ]

    return memo(snap, "frame_texts", make)


def frame_mask(snap: Snapshot, pattern: str | re.Pattern[str]) -> np.ndarray:
    """Per frame id: does `pattern` search-match its "filename:line:name" text?"""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return np.fromiter(
        (rx.search(t) is not None for t in frame_texts(snap)), dtype=bool, count=len(snap.frames)
    )


def stack_any(snap: Snapshot, fmask: np.ndarray) -> np.ndarray:
    """Per stack id: does any of its frames have fmask True?"""
    st = snap.stacks
    if len(st) == 0:
        return np.zeros(0, dtype=bool)
    hit = fmask[st.frame_ids].astype(np.int64)
    cum = np.concatenate([[0], np.cumsum(hit)])
    hit_any: np.ndarray = (cum[st.offsets[1:]] - cum[st.offsets[:-1]]) > 0
    return hit_any


def stack_matches(snap: Snapshot, pattern: str | re.Pattern[str]) -> np.ndarray:
    return stack_any(snap, frame_mask(snap, pattern))


def rows_matching(stack_flags: np.ndarray, stacks: np.ndarray) -> np.ndarray:
    """Per allocation (its stack id; -1 = none): the stack's flag, False without a stack."""
    out = np.zeros(len(stacks), dtype=bool)
    has = stacks >= 0
    if len(stack_flags):
        out[has] = stack_flags[stacks[has]]
    return out


# --- call sites across machines -----------------------------------------------------------
# Two recordings of the same code on two machines (or a real run and its simulation) name
# the same frame with different absolute paths. A site's *key* drops what depends on the
# machine: the installation prefix of a package (site-/dist-packages, a virtualenv, conda,
# the standard library's lib/pythonX.Y), the user's home, and the project's own root (the
# common directory of the snapshot's other source files). What is left is the function,
# the path inside its package or project, and the line.

_INSTALLED = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/")
_HOME = re.compile(r"^(?:/home/[^/]+|/Users/[^/]+|/root|[A-Za-z]:/Users/[^/]+)/")

# (function, path relative to its package or project root, line); -1 site: no stack
SiteKey = tuple[str, str, int]


def _clean(filename: str) -> str:
    p = filename.replace("\\", "/")
    return posixpath.normpath(p) if "/" in p else p  # "scripts/../x.py" -> "x.py"


def project_root(snap: Snapshot) -> str:
    """The common directory (with its trailing "/") of the snapshot's source files outside
    installed packages and the standard library; "" when there are none or it is "/"."""

    def make() -> str:
        f = snap.frames
        ids = np.unique(f.filename[f.kind == PYTHON])
        paths = {_clean(snap.strings[i]) for i in ids.tolist()}
        own = sorted(p for p in paths if p.startswith("/") and not _INSTALLED.match(p))
        if not own:
            return ""
        root = posixpath.commonpath(own) if len(own) > 1 else posixpath.dirname(own[0])
        # files with nothing in common but "/" (a notebook's /tmp cell and the project):
        # no project root; the home directory is then the only prefix dropped
        return "" if root == "/" else root.rstrip("/") + "/"

    return memo(snap, "project_root", make)


def relative_source(filename: str, root: str = "") -> str:
    """`filename` relative to its package or project root: after site-packages /
    dist-packages / lib/pythonX.Y (a virtualenv's and conda's included), else after
    `root`, else after the user's home directory. Names without a directory stay."""
    p = _clean(filename)
    m = _INSTALLED.match(p)
    if m:
        return p[m.end() :]
    if root and p.startswith(root):
        return p[len(root) :]
    return _HOME.sub("", p)


def site_key(snap: Snapshot, frame_id: int) -> SiteKey:
    """The machine-independent name of a call site (first user frame id; -1 = none)."""
    if frame_id < 0:
        return ("", "", -1)
    f = snap.frames
    name = snap.strings[f.name[frame_id]]
    filename = snap.strings[f.filename[frame_id]]
    if f.kind[frame_id] != PYTHON:
        return (short_cpp_name(name), "" if filename in ("", "??") else _clean(filename), 0)
    return (name, relative_source(filename, project_root(snap)), int(f.line[frame_id]))


def key_text(key: SiteKey) -> str:
    """A SiteKey as text: "function (path:line)" like a site label, or "function" for a C++
    frame without a file; the no-stack key is the no-stack label."""
    name, path, line = key
    if line < 0:
        return NO_STACK_LABEL
    if line == 0:
        return f"{name} ({path})" if path else name
    return f"{name} ({path}:{line})"


def same_site(a: SiteKey, b: SiteKey) -> bool:
    """Keys of one site in two layouts: same function and line, and one path a suffix of
    the other at a directory boundary (project roots cut at different depths, e.g.
    "repo/pkg/model.py" and "pkg/model.py"). "a/model.py" and "b/model.py" stay apart."""
    if a[0] != b[0] or a[2] != b[2]:
        return False
    pa, pb = a[1], b[1]
    short, long = (pa, pb) if len(pa) <= len(pb) else (pb, pa)
    return long == short or long.endswith("/" + short)

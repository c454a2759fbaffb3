"""Frame classification and the "first user frame" of a stack.

PyTorch does not say which frames are Python and which are C++; we go by the file name
(Python frames come from .py files or <...> pseudo-files). The noise lists are the ones
PyTorch's own viewer hides (MemoryViz `frameFilter`, _memory_viz `_frame_filter`):
unwinder, interpreter and dispatcher frames that say nothing about the user's code.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # for annotations only
    from memlens.snapshot.model import Snapshot

PYTHON, CPP, NOISE = 0, 1, 2

NOISE_NAME_PARTS = (
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
)
NOISE_FILE_PARTS = (
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
)

# Frames a user rarely wants to be told about: torch's own Python code and the stdlib.
# A frame whose filename matches any of these is skipped when looking for the first user
# frame. Users change the list with --hide / hide_patterns (regular expressions).
DEFAULT_HIDE_PATTERNS: tuple[str, ...] = (
    r"[/\\]torch[/\\]",
    r"[/\\]lib[/\\]python3\.\d+[/\\](?!site-packages|dist-packages)",
    r"^<frozen ",
    r"[/\\]contextlib\.py$",
)


def is_python_file(filename: str) -> bool:
    return filename.endswith((".py", ".pyx")) or filename.startswith("<")


def classify_frame(filename: str, name: str) -> int:
    if is_python_file(filename):
        return PYTHON
    if any(p in name for p in NOISE_NAME_PARTS) or any(p in filename for p in NOISE_FILE_PARTS):
        return NOISE
    return CPP


def hidden_filename_mask(
    strings: Sequence[str], filename_ids: np.ndarray, patterns: Sequence[str]
) -> np.ndarray:
    """Per frame: True if its filename matches one of `patterns`."""
    if not patterns or len(filename_ids) == 0:
        return np.zeros(len(filename_ids), dtype=bool)
    rx = re.compile("|".join(f"(?:{p})" for p in patterns))
    uniq = np.unique(filename_ids)
    hidden_ids = {int(u) for u in uniq if rx.search(strings[u])}
    return np.fromiter(
        (int(f) in hidden_ids for f in filename_ids), dtype=bool, count=len(filename_ids)
    )


AUTOGRAD_NODE = re.compile(r"autograd::generated::\w+::apply|Backward\d*::apply")
ALLOCATOR_NAME = re.compile(
    r"^(c10::|at::cuda::getNewWorkspace|at::detail::empty|at::empty|at::native::empty)"
)


def _name_mask(snapshot: Snapshot, rx: re.Pattern[str]) -> np.ndarray:
    names = snapshot.frames.name
    uniq = np.unique(names)
    hit = {int(u) for u in uniq if rx.search(snapshot.strings[u])}
    return np.fromiter((int(x) in hit for x in names), dtype=bool, count=len(names))


def first_user_frames(snapshot: Snapshot, hide_patterns: Sequence[str] | None = None) -> np.ndarray:
    """For every stack, the frame id that best answers "who allocated this?", or -1.

    Preference, innermost first within each tier:
    1. a Python frame not matching the hide patterns (the user's code);
    2. an autograd node (`...::BmmBackward0::apply`): backward runs on C++ threads with
       no Python frames, and the node names the forward op responsible;
    3. any Python frame (torch internals);
    4. a C++ frame outside the allocator and tensor-factory plumbing;
    5. any C++ frame that is not recording noise.
    """
    patterns = DEFAULT_HIDE_PATTERNS if hide_patterns is None else tuple(hide_patterns)
    frames, stacks = snapshot.frames, snapshot.stacks
    hidden = hidden_filename_mask(snapshot.strings, frames.filename, patterns)
    kind = np.asarray(frames.kind)
    autograd = _name_mask(snapshot, AUTOGRAD_NODE)
    plumbing = _name_mask(snapshot, ALLOCATOR_NAME)
    n = len(stacks)
    out = np.full(n, -1, dtype=np.int32)
    if n == 0:
        return out
    fids = np.asarray(stacks.frame_ids)
    owner = np.repeat(np.arange(n), np.diff(stacks.offsets))
    pos = np.arange(len(fids))
    py, cpp = kind[fids] == PYTHON, kind[fids] == CPP
    for good in (py & ~hidden[fids], cpp & autograd[fids], py, cpp & ~plumbing[fids], cpp):
        todo = out < 0
        if not todo.any():
            break
        sel = good & todo[owner]
        if not sel.any():
            continue
        first_pos = np.full(n, len(fids), dtype=np.int64)
        np.minimum.at(first_pos, owner[sel], pos[sel])
        hit = first_pos < len(fids)
        out[hit] = fids[first_pos[hit]]
    return out


def short_cpp_name(name: str) -> str:
    """Drop the parameter list of a demangled C++ name: `ns::f(int, long) const` -> `ns::f`."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and i > 0 and not name.startswith("(anonymous", i):
            return name[:i]
    return name

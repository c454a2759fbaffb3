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
    r"[/\\]torch_npu[/\\]",  # Ascend's torch backend: torch's own code on an NPU
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


# Patterns below are matched against a C++ frame's name without its parameter list
# (short_cpp_name), so a node's name inside a template argument of another frame, e.g.
# `CopySlices::apply_impl<...CopySlices::apply(...)...>`, never matches.
#
# An autograd graph node: `torch::autograd::<Node>::apply` - the generated
# `...::MmBackward0::apply`, `AccumulateGrad::apply` (writes .grad), `CopySlices::apply`,
# `CopyBackwards::apply`, C++ custom functions' `CppNode<F>::apply` - or any
# `...Backward<N>::apply`. Backward runs on C++ threads without Python frames; the node
# names what the memory is for (the forward op, or the gradient being accumulated).
# `torch::autograd::Function<F>::apply` is a C++ custom function's *forward* entry: not a node.
AUTOGRAD_NODE = re.compile(
    r"(?:^|\s)torch::autograd::(?!Function<)(?:\w+::)*\w+(?:<.*>)?::apply$|Backward\d*::apply$"
)
# The autograd engine's own work outside a node (summing two gradients of one input in
# `torch::autograd::accumulate`, reducing a gradient to its input's shape in
# `InputMetadata::reduce_grad`). VariableType is the dispatcher's autograd kernel: it
# only forwards to the op, so it says nothing; Function<F>::apply is a forward entry.
AUTOGRAD_ENGINE = re.compile(r"(?:^|\s)torch::autograd::(?!VariableType::|Function<)")
# Allocator, tensor-factory and dispatcher plumbing: frames that say how memory was
# obtained, not who wanted it (`wrapper_CUDA__empty_strided`, `create_out`, `at::_ops::`).
ALLOCATOR_NAME = re.compile(
    r"^(c10::|at::cuda::getNewWorkspace|at::detail::empty|at::empty|at::native::empty"
    r"|at::_ops::|at::meta::|at::TensorIteratorBase::|at::\(anonymous namespace\)::"
    r"|torch::autograd::VariableType::)"
)


def _name_mask(snapshot: Snapshot, rx: re.Pattern[str]) -> np.ndarray:
    """Per frame: does its name (without parameters) match `rx`?"""
    names = snapshot.frames.name
    uniq = np.unique(names)
    hit = {int(u) for u in uniq if rx.search(short_cpp_name(snapshot.strings[u]))}
    return np.fromiter((int(x) in hit for x in names), dtype=bool, count=len(names))


def autograd_node_mask(snapshot: Snapshot) -> np.ndarray:
    """Per frame: is it an autograd node's `apply` (see AUTOGRAD_NODE)?"""
    mask: np.ndarray = _name_mask(snapshot, AUTOGRAD_NODE) & (
        np.asarray(snapshot.frames.kind) == CPP
    )
    return mask


def first_user_frames(snapshot: Snapshot, hide_patterns: Sequence[str] | None = None) -> np.ndarray:
    """For every stack, the frame id that best answers "who allocated this?", or -1.

    This is THE site-naming rule: every view (peak, summary, diff, leaks, viewer, TUI,
    report) names an allocation by this frame (analysis.sites.frame_label). Preference,
    innermost first within each tier:
    1. a Python frame not matching the hide patterns (the user's code);
    2. an autograd node (`...::BmmBackward0::apply`, `AccumulateGrad::apply`): backward
       runs on C++ threads with no Python frames, and the node names the forward op
       responsible, or the gradient being accumulated;
    3. in a stack without Python frames, the autograd engine's own work
       (`torch::autograd::accumulate`, `InputMetadata::reduce_grad`);
    4. any Python frame (torch internals);
    5. a C++ frame outside the allocator, tensor-factory and dispatcher plumbing;
    6. any C++ frame that is not recording noise.
    """
    patterns = DEFAULT_HIDE_PATTERNS if hide_patterns is None else tuple(hide_patterns)
    frames, stacks = snapshot.frames, snapshot.stacks
    hidden = hidden_filename_mask(snapshot.strings, frames.filename, patterns)
    kind = np.asarray(frames.kind)
    autograd = autograd_node_mask(snapshot)
    engine = _name_mask(snapshot, AUTOGRAD_ENGINE)
    plumbing = _name_mask(snapshot, ALLOCATOR_NAME)
    n = len(stacks)
    out = np.full(n, -1, dtype=np.int32)
    if n == 0:
        return out
    fids = np.asarray(stacks.frame_ids)
    owner = np.repeat(np.arange(n), np.diff(stacks.offsets))
    pos = np.arange(len(fids))
    py, cpp = kind[fids] == PYTHON, kind[fids] == CPP
    no_python = np.ones(n, dtype=bool)
    no_python[owner[py]] = False
    tiers = (
        py & ~hidden[fids],
        autograd[fids],
        # engine frames only on a backward thread: in a Python stack, torch::autograd::
        # also holds the Python bindings (THPVariable_add), which Python frames beat
        cpp & engine[fids] & ~plumbing[fids] & no_python[owner],
        py,
        cpp & ~plumbing[fids],
        cpp,
    )
    for good in tiers:
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


_ANGLE_OR_PAREN = re.compile(r"[<>(]")


def short_cpp_name(name: str) -> str:
    """Drop the parameter list of a demangled C++ name: `ns::f(int, long) const` -> `ns::f`."""
    if "(" not in name:
        return name
    depth = 0
    # only the brackets matter: templated names run to hundreds of characters
    for m in _ANGLE_OR_PAREN.finditer(name):
        i = m.start()
        ch = name[i]
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0 and i > 0 and not name.startswith("(anonymous", i):
            return name[:i]
    return name

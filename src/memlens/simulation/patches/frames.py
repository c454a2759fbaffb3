"""Python stacks for trace entries, innermost first, as PyTorch records them.

Frames inside memlens.simulate and inside torch's fake-tensor / dispatch machinery are
dropped: on a GPU those layers do not exist, so keeping them would only add noise.
Identical frames and stacks are shared objects, as in PyTorch's own snapshots.
"""

from __future__ import annotations

import dis
import os
import runpy
import sys
import weakref
from types import FrameType
from typing import Any

import torch

_TORCH_DIR = os.path.dirname(torch.__file__)
_HIDDEN_PREFIXES = tuple(
    os.path.join(_TORCH_DIR, p)
    for p in (
        "_subclasses",
        "utils/_python_dispatch.py",
        "_ops.py",
        "_compile.py",
        "_dynamo",
        "utils/_stats.py",
        "_decomp",
        "_prims",
        "_refs",
        "_meta_registrations.py",
        "_library",
        "utils/_pytree.py",
    )
)
# the whole simulation package (patches/, knobs/, distributed/): its frames are the model's,
# never the user's
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_WEAKREF_FILE = weakref.__file__
# runpy's frame that executes a script's or module's code: `memlens simulate` runs the
# script through runpy, and everything below this frame (runpy, memlens's CLI, click) is
# memlens's own; a real `python script.py` has nothing there, `python -m` has runpy.
_RUN_CODE = runpy._run_code.__code__  # type: ignore[attr-defined]
_APPLY_ARGS = "std::vector<at::Tensor, std::allocator<at::Tensor> >&&"  # Node::apply's  # weakref.finalize.__call__ runs our free callback


class FrameCollector:
    def __init__(self, enabled: bool = True, max_depth: int = 64):
        self.enabled = enabled
        self.max_depth = max_depth
        # keyed by the code object's id, not the object: a code object hashes its
        # constants, and code that PyTorch generates at run time can hold a dict among
        # them (AOTAutograd's runtime wrapper), which cannot be hashed. `_codes` keeps
        # every code object seen alive, so that no id is reused.
        self._frames: dict[tuple[int, int], dict[str, Any]] = {}
        self._codes: dict[int, Any] = {}
        self._stacks: dict[tuple[int, ...], list[dict[str, Any]]] = {}
        self._hidden: dict[str, bool] = {}
        self._hidden_code: dict[int, bool] = {}  # id(code) -> _is_hidden(its file)
        self._node_stacks: dict[str, list[dict[str, Any]]] = {}
        # `memlens simulate`: stacks stop at runpy's `_run_code` frame (see _RUN_CODE),
        # and end with `tail`, what a real run has there instead.
        self.cut_at_runpy = False
        self.tail: list[dict[str, Any]] = []

    def _is_hidden(self, filename: str) -> bool:
        hidden = self._hidden.get(filename)
        if hidden is None:
            hidden = (
                filename.startswith(_HIDDEN_PREFIXES)
                or filename.startswith(_OWN_DIR)
                or filename == _WEAKREF_FILE
            )
            self._hidden[filename] = hidden
        return hidden

    def collect(self) -> list[dict[str, Any]]:
        if not self.enabled:
            return []
        frame: FrameType | None = sys._getframe(1)
        out: list[dict[str, Any]] = []
        # one walk per allocation and free: names bound locally, hiddenness per code object
        hidden, frames, max_depth = self._hidden_code, self._frames, self.max_depth
        cut = _RUN_CODE if self.cut_at_runpy else None
        while frame is not None and len(out) < max_depth:
            code = frame.f_code
            if code is cut:
                out.extend(self.tail[: max_depth - len(out)])
                break
            skip = hidden.get(id(code))
            if skip is None:
                self._codes[id(code)] = code
                skip = hidden[id(code)] = self._is_hidden(code.co_filename)
            if not skip:
                key = (id(code), frame.f_lineno)
                entry = frames.get(key)
                if entry is None:
                    entry = {
                        "filename": code.co_filename,
                        "line": key[1],
                        "name": code.co_name,
                    }
                    frames[key] = entry
                out.append(entry)
            frame = frame.f_back
        stack_key = tuple(map(id, out))
        shared = self._stacks.get(stack_key)
        if shared is None:
            self._stacks[stack_key] = shared = out
        return shared

    def autograd_node(self, node_name: str) -> list[dict[str, Any]]:
        """The stack of an allocation inside a C++ autograd node's backward: on a GPU it
        runs on the autograd engine's thread, without Python frames; the recorder's C++
        frames name the node's `apply`, as this one frame does."""
        if not self.enabled:
            return []
        stack = self._node_stacks.get(node_name)
        if stack is None:
            qualified = (
                node_name if "::" in node_name else f"torch::autograd::generated::{node_name}"
            )
            stack = [{"filename": "??", "line": 0, "name": f"{qualified}::apply({_APPLY_ARGS})"}]
            self._node_stacks[node_name] = stack
        return stack


def _call_line(code: Any, callee: str) -> int:
    for instruction in dis.get_instructions(code):
        # Instruction.positions: Python 3.11+ (the line of any instruction, not only a
        # line's first); starts_line before
        positions = getattr(instruction, "positions", None)
        line = positions.lineno if positions is not None else instruction.starts_line
        if instruction.argval == callee and line is not None:
            return int(line)
    raise LookupError(f"{callee} is not called in {code.co_name}")


def module_main_frames() -> list[dict[str, Any]]:
    """The frames `python -m MODULE` has below the module's own, outermost last, as
    PyTorch records them: `_run_code` (at its `exec`) and `_run_module_as_main` (at its
    call of `_run_code`), both in `<frozen runpy>`, at this interpreter's line numbers."""
    main = runpy._run_module_as_main.__code__  # type: ignore[attr-defined]
    return [
        {
            "filename": _RUN_CODE.co_filename,
            "line": _call_line(_RUN_CODE, "exec"),
            "name": "_run_code",
        },
        {
            "filename": main.co_filename,
            "line": _call_line(main, "_run_code"),
            "name": "_run_module_as_main",
        },
    ]

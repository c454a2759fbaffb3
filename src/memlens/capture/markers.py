"""Named ranges in a recording: `memlens.stage("forward")` and `memlens.step()`.

Both are `torch.profiler.record_function` ranges. While CUDA memory history is recorded,
PyTorch stores each range's START and END (with a timestamp) in the snapshot's
`external_annotations`, which memlens lines up with the allocation events. By default torch
records the ranges of the thread that switched recording on.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from memlens.capture.errors import RecordError

F = TypeVar("F", bound=Callable[..., Any])

STEP_PREFIX = "memlens.step#"


def record_function(name: str) -> Any:
    """torch.profiler.record_function(name): imported late (torch is optional), and the one
    place the markers reach torch, so a test can put a recorder of its own here."""
    from torch.profiler import record_function as torch_record_function

    return torch_record_function(name)


class stage:  # noqa: N801 - used like a function: memlens.stage("forward")
    """A named range, as a context manager or a decorator:

    with memlens.stage("forward"):
        out = model(x)

    @memlens.stage("optimizer")
    def update(): ...
    """

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise RecordError(f"memlens.stage needs a non-empty name, got {name!r}")
        self.name = name
        # Ranges entered and not yet left, per thread: one stage object may be re-entered
        # (recursion) or shared between threads.
        self._local = threading.local()

    def _open(self) -> list[Any]:
        if not hasattr(self._local, "open"):
            self._local.open = []
        opened: list[Any] = self._local.open
        return opened

    def __enter__(self) -> stage:
        ctx = record_function(self.name)
        ctx.__enter__()
        self._open().append(ctx)
        return self

    def __exit__(self, *exc: Any) -> None:  # (type, value, traceback), handed on
        self._open().pop().__exit__(*exc)

    def __call__(self, fn: F) -> F:
        @functools.wraps(fn)
        def staged(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return staged  # type: ignore[return-value]

    def __repr__(self) -> str:
        return f"memlens.stage({self.name!r})"


_step_lock = threading.Lock()
_step_count = 0
_step_hooks: list[Callable[[int], None]] = []


def step() -> int:
    """Mark a training-loop step; returns its number (1 for the first call in the process).

    Call it once per iteration, at the same place each time (the start of the iteration is
    the usual choice). Each call leaves a zero-length range named `memlens.step#N` in the
    snapshot's `external_annotations`, so memlens can split the timeline into steps;
    `memlens run --every-n-steps N` also dumps a snapshot every N calls.
    """
    global _step_count
    with _step_lock:
        _step_count += 1
        number = _step_count
        hooks = list(_step_hooks)
    with record_function(f"{STEP_PREFIX}{number}"):
        pass
    for hook in hooks:
        hook(number)
    return number


def add_step_hook(hook: Callable[[int], None]) -> Callable[[], None]:
    """Call `hook(step_number)` after every `memlens.step()`; returns a function that removes
    it. Used by `memlens run --every-n-steps`."""
    with _step_lock:
        _step_hooks.append(hook)

    def remove() -> None:
        with _step_lock:
            if hook in _step_hooks:
                _step_hooks.remove(hook)

    return remove


def _reset_for_tests() -> None:
    global _step_count
    with _step_lock:
        _step_count = 0
        _step_hooks.clear()

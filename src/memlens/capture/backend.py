"""The only place memlens's capture code touches torch's CUDA memory APIs.

`get_backend()` returns the backend in use: `TorchCudaBackend` normally. Tests swap in a
recording fake with `set_backend()`, or, for a `memlens run` subprocess, with the environment
variable MEMLENS_RECORD_BACKEND=module:attr (a testing hook: `attr` is a backend object or a
class/factory called once with no arguments).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from memlens.capture.errors import NoCudaError, RecordError

BACKEND_ENV = "MEMLENS_RECORD_BACKEND"

# Keep the last 100,000 alloc/free events, as PyTorch's own docs suggest: each entry with its
# stack costs a few KB of host memory, and torch's default (sys.maxsize) grows without bound.
DEFAULT_MAX_ENTRIES = 100_000
STACKS = ("python", "all")
CONTEXTS = ("state", "alloc", "all")

# device, bytes requested, bytes allocated on the device, bytes free on the device
OomCallback = Callable[[int, int, int, int], None]


@dataclass(frozen=True)
class RecordSettings:
    """Arguments for torch.cuda.memory._record_memory_history(enabled="all", ...)."""

    max_entries: int = DEFAULT_MAX_ENTRIES
    stacks: str = "python"
    context: str | None = "all"

    def __post_init__(self) -> None:
        if isinstance(self.max_entries, bool) or not isinstance(self.max_entries, int):
            raise RecordError(f"max_entries must be a whole number, got {self.max_entries!r}")
        if self.max_entries < 1:
            raise RecordError(f"max_entries must be at least 1, got {self.max_entries}")
        if self.stacks not in STACKS:
            raise RecordError(f"stacks must be 'python' or 'all', got {self.stacks!r}")
        if self.context is not None and self.context not in CONTEXTS:
            raise RecordError(
                f"context must be 'state', 'alloc', 'all' or None, got {self.context!r}"
            )


class Backend(Protocol):
    def is_available(self) -> bool: ...

    def unavailable_reason(self) -> str | None: ...

    def history_enabled(self) -> bool | None:
        """True/False when it can be told whether history is being recorded; None if not."""

    def start(self, settings: RecordSettings) -> None: ...

    def stop(self) -> None: ...

    def snapshot(self) -> dict[str, Any]: ...

    def attach_oom_observer(self, callback: OomCallback) -> None: ...


class TorchCudaBackend:
    """PyTorch's CUDA caching allocator, through its (private, but stable) snapshot API."""

    def _torch(self) -> Any:
        try:
            import torch
        except ImportError as exc:
            raise NoCudaError("torch is not installed") from exc
        return torch

    def unavailable_reason(self) -> str | None:
        # A missing torch deserves a word; a torch without CUDA is what the message says.
        try:
            self._torch()
        except NoCudaError:
            return "torch is not installed"
        return None

    def is_available(self) -> bool:
        try:
            torch = self._torch()
        except NoCudaError:
            return False
        return bool(torch.cuda.is_available())

    def history_enabled(self) -> bool | None:
        torch = self._torch()
        probe = getattr(torch._C, "_cuda_isHistoryEnabled", None)
        # Both probes read the caching allocator's per-device state, which exists only once
        # CUDA is initialized (recording would initialize it anyway).
        torch.cuda.init()
        if probe is not None:
            return bool(probe())
        # Older builds: recorded events prove history is on (switching it off clears them);
        # no events proves nothing.
        traces = torch.cuda.memory._snapshot().get("device_traces", [])
        return True if any(traces) else None

    def start(self, settings: RecordSettings) -> None:
        self._torch().cuda.memory._record_memory_history(
            enabled="all",
            context=settings.context,
            stacks=settings.stacks,
            max_entries=settings.max_entries,
        )

    def stop(self) -> None:
        # Disabling also clears the recorded history: callers dump before they stop.
        self._torch().cuda.memory._record_memory_history(enabled=None)

    def snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = self._torch().cuda.memory._snapshot()
        return snap

    def attach_oom_observer(self, callback: OomCallback) -> None:
        attach = getattr(self._torch()._C, "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            raise RecordError(
                "this PyTorch build cannot report CUDA out-of-memory errors "
                "(no torch._C._cuda_attach_out_of_memory_observer); "
                "dumping on OOM needs a CUDA build of PyTorch"
            )
        attach(callback)


_override: Backend | None = None
_from_env: dict[str, Backend] = {}
_default: TorchCudaBackend | None = None


def set_backend(backend: Backend | None) -> Backend | None:
    """Use `backend` for every later capture call (None: back to the default). Returns the
    previous override. Meant for tests."""
    global _override
    previous, _override = _override, backend
    return previous


def _reset_for_tests() -> None:
    global _override
    _override = None
    _from_env.clear()


def _load_from_spec(spec: str) -> Backend:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise RecordError(f"{BACKEND_ENV} must look like module:attr, got {spec!r}")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise RecordError(f"{BACKEND_ENV}={spec!r} cannot be loaded: {exc}") from exc
    # A class or a factory is called once; an object with the backend methods is used as is.
    backend: Backend = (
        target() if isinstance(target, type) or not hasattr(target, "snapshot") else target
    )
    return backend


def get_backend() -> Backend:
    """The backend capture calls use now (cached, so one process shares one fake or torch)."""
    global _default
    if _override is not None:
        return _override
    spec = os.environ.get(BACKEND_ENV)
    if spec:
        if spec not in _from_env:
            _from_env[spec] = _load_from_spec(spec)
            print(f"memlens: using capture backend {spec} ({BACKEND_ENV})", file=sys.stderr)
        return _from_env[spec]
    if _default is None:
        _default = TorchCudaBackend()
    return _default


def require_available(backend: Backend) -> None:
    """Raise the clear no-CUDA error before anything is started."""
    if not backend.is_available():
        raise NoCudaError(backend.unavailable_reason())

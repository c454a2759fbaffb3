"""memlens: see exactly where your PyTorch GPU memory goes.

Public API. Names are imported lazily so that `import memlens` stays fast and never
pulls in torch, the web server or the terminal UI until they are used.

    snap = memlens.load("step.pickle")        # safe, cached, columnar
    dev = snap.device(0)
    dev.peak_active_bytes, dev.active_at(1234), dev.live_at(1234)
"""

from __future__ import annotations

import importlib
from typing import Any

from memlens.errors import CacheError, MemlensError, SnapshotError, UnsafePickleError

__version__ = "0.1.0"

# public name -> (module, attribute)
_LAZY: dict[str, tuple[str, str]] = {
    # reading
    "load": ("memlens.snapshot.loader", "load"),
    "Snapshot": ("memlens.snapshot.model", "Snapshot"),
    "DeviceTrace": ("memlens.snapshot.model", "DeviceTrace"),
    "generate_snapshot": ("memlens.simulation.synthetic", "generate_snapshot"),
    # recording (torch needed only when called)
    "record": ("memlens.recording", "record"),
    "stage": ("memlens.capture.markers", "stage"),
    "step": ("memlens.capture.markers", "step"),
    "dump_on_oom": ("memlens.capture.oom", "dump_on_oom"),
    # simulation without a GPU
    "simulate": ("memlens.simulation.api", "simulate"),
    # tensor inspector
    "inspect": ("memlens.inspector.api", "inspect"),
}

__all__ = [
    "CacheError",
    "MemlensError",
    "SnapshotError",
    "UnsafePickleError",
    "__version__",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'memlens' has no attribute {name!r}")
    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

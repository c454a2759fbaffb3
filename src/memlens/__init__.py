"""memlens: see exactly where your PyTorch GPU memory goes.

Public API. Names are imported lazily so that `import memlens` stays fast and never
pulls in torch, the web server or the terminal UI until they are used.

    snap = memlens.load("step.pickle")        # safe, cached, columnar
    dev = snap.device(0)
    dev.peak_active_bytes, dev.active_at(1234), dev.live_at(1234)
    memlens.analyze("leaks", snap, top=5)     # = `memlens leaks step.pickle --top 5 --json`
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from memlens.errors import CacheError, MemlensError, SnapshotError, UnsafePickleError

if TYPE_CHECKING:  # the lazy names below, for type checkers and IDEs ("X as X": re-exported)
    from memlens.analysis.registry import analyze as analyze
    from memlens.capture.markers import stage as stage
    from memlens.capture.markers import step as step
    from memlens.capture.oom import dump_on_oom as dump_on_oom
    from memlens.inspector.api import inspect as inspect
    from memlens.notebook import load_ipython_extension as load_ipython_extension
    from memlens.recording import record as record
    from memlens.simulation.api import simulate as simulate
    from memlens.simulation.estimate import estimate as estimate
    from memlens.simulation.synthetic import generate_snapshot as generate_snapshot
    from memlens.snapshot.loader import load as load
    from memlens.snapshot.model import DeviceTrace as DeviceTrace
    from memlens.snapshot.model import Snapshot as Snapshot

    __version__: str

# public name -> the module that defines it under that name
_LAZY: dict[str, str] = {
    # reading
    "load": "memlens.snapshot.loader",
    "Snapshot": "memlens.snapshot.model",
    "DeviceTrace": "memlens.snapshot.model",
    "generate_snapshot": "memlens.simulation.synthetic",
    # any registered analysis by name (memlens.analysis.registry), as its --json
    "analyze": "memlens.analysis.registry",
    # recording (torch needed only when called)
    "record": "memlens.recording",
    "stage": "memlens.capture.markers",
    "step": "memlens.capture.markers",
    "dump_on_oom": "memlens.capture.oom",
    # simulation without a GPU
    "simulate": "memlens.simulation.api",
    "estimate": "memlens.simulation.estimate",
    # tensor inspector
    "inspect": "memlens.inspector.api",
    # `%load_ext memlens`: IPython looks this name up on the module (memlens[notebook])
    "load_ipython_extension": "memlens.notebook",
}

__all__ = [
    "CacheError",
    "MemlensError",
    "SnapshotError",
    "UnsafePickleError",
    "__version__",
    *_LAZY,
]


def _version() -> str:
    """The installed distribution's version: pyproject.toml is its one source. Read on
    first use (importlib.metadata costs ~30 ms, `import memlens` ~1 ms)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memlens")
    except PackageNotFoundError:  # a source tree on sys.path, never installed
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = value = _version()
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memlens' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)

"""The tensor inspector: activations, gradients and parameters over training, off-process.

``memlens.inspect(model, ...)`` (the function, in ``api.py``) starts it; ``memlens
inspect-report RUN`` rebuilds the dashboard, plots and videos of a run. This package is
``memlens.inspector``, not ``memlens.inspect``, so that the name ``memlens.inspect`` is always
the function whatever was imported first. Modules:

- ``api``: the Inspector's lifecycle (run directory, steps, sampling, shutdown).
- ``config``: ``InspectConfig``, the validated settings with their defaults.
- ``hooks``: the forward/backward/gradient hooks and the walk over a module's tensors.
- ``transport``: the bounded queue, the byte budget and starting the background process.
- ``select``: which modules and parameters are watched.
- ``reduce``: tensor -> small CPU payload in the training process (torch).
- ``stats``: the statistics' definitions, in numpy (shared by both processes).
- ``worker``: the background process (no torch): files, alerts, rendering.
- ``store``: the run directory format and reading it back.
- ``render``: dashboard HTML, PNG plots, videos.
- ``alerts``: NaN/Inf, exploding/vanishing norms, dead activations.
- ``annotations``: activation bytes per step as a snapshot's annotations (no torch).

Importing this package does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "InspectConfig",
    "Inspector",
    "activation_annotations",
    "inspect",
    "load_run",
    "render_run",
]

# public name -> submodule; imported on first use so that this package stays light
_LAZY = {
    "inspect": "api",
    "Inspector": "api",
    "InspectConfig": "config",
    "load_run": "store",
    "activation_annotations": "annotations",
    "render_run": "render",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'memlens.inspector' has no attribute {name!r}")
    return getattr(importlib.import_module(f"memlens.inspector.{module}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)

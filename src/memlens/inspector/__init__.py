"""The tensor inspector: activations, gradients and parameters over training, off-process.

``memlens.inspect(model, ...)`` (in ``api.py``) starts it; ``memlens inspect-report RUN``
rebuilds the dashboard, plots and videos of a run. Modules:

- ``api``: the Inspector (hooks, sampling, the bounded queue, shutdown).
- ``select``: which modules and parameters are watched.
- ``reduce``: tensor -> small CPU payload in the training process (torch).
- ``stats``: the statistics' definitions, in numpy (shared by both processes).
- ``worker``: the background process (no torch): files, alerts, rendering.
- ``store``: the run directory format and reading it back.
- ``render``: dashboard HTML, PNG plots, videos.
- ``alerts``: NaN/Inf, exploding/vanishing norms, dead activations.
- ``annotations``: activation bytes per step as a snapshot's annotations (no torch).

Importing this package does not import torch.

``memlens.inspect`` is both this package and the ``inspect`` function: once a submodule
has been imported Python binds the package to that name on ``memlens``, so the package
itself is callable and forwards to :func:`memlens.inspect.api.inspect`.
"""

from __future__ import annotations

import sys
import types

__all__ = ["activation_annotations", "inspect", "load_run", "render_run"]


def __getattr__(name: str):
    if name == "inspect":
        from memlens.inspect.api import inspect

        return inspect
    if name == "load_run":
        from memlens.inspect.store import load_run

        return load_run
    if name == "activation_annotations":
        from memlens.inspect.annotations import activation_annotations

        return activation_annotations
    if name == "render_run":
        from memlens.inspect.render import render_run

        return render_run
    raise AttributeError(name)


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from memlens.inspect.api import inspect

        return inspect(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

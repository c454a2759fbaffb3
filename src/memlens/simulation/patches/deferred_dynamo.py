"""Dynamo's configuration without the rest of Dynamo until something uses it.

A FakeTensorMode (torch/_subclasses/fake_tensor.py) imports `torch._dynamo.config` when
it is made and reads it at each op it has no cached answer for. The import runs the
package's `__init__`, which imports all of Dynamo, and with it parts of Inductor,
AOTAutograd, FSDP and DTensor: about 2 s of CPU that `memlens simulate` paid at the start
of every script (and rank), though only a script that compiles, steps an optimizer
(`torch._dynamo.graph_break()`) or checkpoints uses any of it.

`defer()` puts the package in `sys.modules` with only its `config` submodule imported
(torch's own module, the one Dynamo uses once loaded). The first use of anything else
runs the package's own `__init__` on that same module object, the state `import
torch._dynamo` leaves: reading another attribute of the package (`torch._dynamo.graph_break`,
`from torch._dynamo import ...`, torch.compile's `torch._dynamo.optimize`) or importing
another of its submodules (`import torch._dynamo.utils`, which on its own would skip the
package's `__init__`).

One use is answered without Dynamo: `torch._disable_dynamo` (torch/_compile.py), which
wraps fake tensors' dispatch and many of torch's meta functions, asks for
`torch._dynamo.disable(fn)` at a function's first call and caches the answer on `fn`.
Until Dynamo is imported no frame evaluation callback can be set for it to switch off, so
the cached function runs `fn` with none set (as the simulation's tracker runs itself);
when Dynamo is imported each gets what `disable` answers then, as if asked for at once.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder
from typing import Any

PACKAGE = "torch._dynamo"
_CONFIG = PACKAGE + ".config"
# the functions torch._disable_dynamo cached a stand-in on: (fn, recursive)
_STAND_INS: list[tuple[Callable[..., Any], bool]] = []


def defer() -> None:
    """Make `torch._dynamo.config` importable without importing Dynamo (once per process;
    nothing to do where Dynamo is imported already)."""
    if PACKAGE in sys.modules:
        return
    import torch

    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.loader is None:
        return  # a build without Dynamo: FakeTensorMode fails as it would have
    package = importlib.util.module_from_spec(spec)
    package.__class__ = _DeferredPackage
    sys.modules[PACKAGE] = package
    torch._dynamo = package  # as the import system binds a submodule on its parent
    sys.meta_path.insert(0, _FINDER)
    try:
        importlib.import_module(_CONFIG)
    except BaseException:
        _forget(package)
        raise


class _DeferredPackage(types.ModuleType):
    """torch._dynamo before its `__init__` ran: `config` (and `__path__`, `__spec__`, ...)
    are set; asking for anything else runs the `__init__`, then answers."""

    def __getattr__(self, name: str) -> Any:
        if name == "disable" and _asked_by_disable_dynamo(sys._getframe(1)):
            return _disable_later
        _initialise(self)
        return getattr(self, name)


def _asked_by_disable_dynamo(frame: types.FrameType) -> bool:
    import torch._compile

    return frame.f_code.co_filename == torch._compile.__file__


def _disable_later(
    fn: Callable[..., Any], recursive: bool = True, wrapping: bool = True
) -> Callable[..., Any]:
    """`torch._dynamo.disable(fn, recursive, wrapping=False)` as torch._disable_dynamo asks
    for it while Dynamo is deferred: `fn`, run with no frame evaluation callback set."""
    from torch._C._dynamo.eval_frame import set_eval_frame

    def run(*args: Any, **kwargs: Any) -> Any:
        prior = set_eval_frame(None)
        try:
            return fn(*args, **kwargs)
        finally:
            set_eval_frame(prior)

    _STAND_INS.append((fn, recursive))
    return run


def _initialise(package: types.ModuleType) -> None:
    """Run the package's `__init__` on its module: the state `import torch._dynamo` leaves.
    Torch's dispatch modes are off meanwhile (it may start inside a simulation's fake mode
    and tracker, from an op's Python code), as they were off when Dynamo was imported up
    front; its import runs no tensor op today, so this only keeps it that way."""
    from torch.utils._python_dispatch import _disable_current_modes

    deferred = isinstance(package, _DeferredPackage)
    if not deferred:
        return  # an `__init__` already ran it (a use from inside the `__init__` itself)
    package.__class__ = types.ModuleType
    _remove_finder()
    spec = package.__spec__
    assert spec is not None and spec.loader is not None  # defer() made it from one
    try:
        with _disable_current_modes():
            spec.loader.exec_module(package)
    except BaseException:
        _forget(package)  # as a failed import leaves it: absent, to be tried again
        raise
    # what torch._disable_dynamo would have cached, had Dynamo been there at first call
    disable = package.disable
    while _STAND_INS:
        fn, recursive = _STAND_INS.pop()
        fn.__dynamo_disable = disable(fn, recursive, wrapping=False)  # type: ignore[attr-defined]


def _forget(package: types.ModuleType) -> None:
    import torch

    _remove_finder()
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    if getattr(torch, "_dynamo", None) is package:
        del torch._dynamo
    for fn, _ in _STAND_INS:
        vars(fn).pop("__dynamo_disable", None)  # asked for again at the next call
    _STAND_INS.clear()


def _remove_finder() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


class _FirstImportsPackage(MetaPathFinder):
    """On `sys.meta_path` while the package is deferred: importing one of its submodules
    (but `config`) first runs the package's `__init__`, as it would have run before."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> ModuleSpec | None:
        package = sys.modules.get(PACKAGE)
        if not name.startswith(PACKAGE + ".") or name == _CONFIG:
            return None
        if not isinstance(package, _DeferredPackage):
            return None
        spec = PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _AfterPackage(spec.loader, package)
        return spec


class _AfterPackage(Loader):
    """A submodule's loader that runs the package's `__init__` first. That `__init__`
    may import this very submodule: the import system then answers the module it made
    (`_load_unlocked` returns what `sys.modules` holds once `exec_module` returns)."""

    def __init__(self, loader: Loader, package: types.ModuleType):
        self.loader = loader
        self.package = package

    def create_module(self, spec: ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        name = module.__name__
        placeholder = sys.modules.pop(name)  # so that the `__init__` can import it afresh
        try:
            _initialise(self.package)
        except BaseException:
            sys.modules[name] = placeholder  # the import system removes it on failure
            raise
        if name not in sys.modules:  # the `__init__` did not import it: import it here
            sys.modules[name] = placeholder
            self.loader.exec_module(module)
            # the module names its own loader, as if imported without this detour
            module.__loader__ = self.loader
            if module.__spec__ is not None:
                module.__spec__.loader = self.loader


_FINDER = _FirstImportsPackage()

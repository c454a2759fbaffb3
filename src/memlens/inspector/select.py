"""Which modules and parameters the inspector watches."""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterable
from typing import Any

from memlens.errors import MemlensError

ROOT_LABEL = "(model)"


def label(name: str) -> str:
    return name or ROOT_LABEL


def _as_list(layers: Any) -> list[Any]:
    if layers is None:
        return []
    if isinstance(layers, (str, type)) or callable(layers) and not isinstance(layers, type):
        return [layers]
    return list(layers)


def _opaque_types() -> tuple[type, ...]:
    """Modules whose forward does not call their children (so those never fire hooks)."""
    import torch.nn as nn

    return (nn.MultiheadAttention,)


def leaf_modules(named: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Modules with no children, plus opaque ones (nn.MultiheadAttention) instead of theirs."""
    opaque = _opaque_types()
    inside = [n for n, m in named if isinstance(m, opaque)]
    out = []
    for n, m in named:
        if any(n != o and (o == "" or n.startswith(o + ".")) for o in inside):
            continue
        if isinstance(m, opaque) or next(m.children(), None) is None:
            out.append((n, m))
    return out


def select_modules(
    model: Any, layers: str | type | Callable[..., Any] | Iterable[Any] | None = None
) -> list[tuple[str, Any]]:
    """Modules to hook, in model order.

    ``layers`` is None (every leaf module: one with no children; an ``nn.MultiheadAttention``
    counts as a leaf, since its forward uses its ``out_proj`` weights without calling it), or one or a list of:
    a module name as in ``model.named_modules()`` (``"encoder.layers.0"``; ``""`` is the model
    itself), a glob over names (``"encoder.layers.*.linear1"``), a module class
    (``torch.nn.Linear``, matched with isinstance), or a predicate ``f(name, module) -> bool``.
    """
    named = list(model.named_modules())
    if layers is None:
        return leaf_modules(named) or [("", model)]
    specs = _as_list(layers)
    chosen: set[str] = set()
    names = [n for n, _ in named]
    for spec in specs:
        if isinstance(spec, str):
            if any(c in spec for c in "*?["):
                hits = [n for n in names if fnmatch.fnmatchcase(n, spec)]
                if not hits:
                    raise MemlensError(f"no module name matches the pattern {spec!r}")
            else:
                if spec not in names:
                    close = difflib.get_close_matches(spec, names, n=3)
                    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
                    raise MemlensError(f"the model has no module named {spec!r}{hint}")
                hits = [spec]
        elif isinstance(spec, type):
            hits = [n for n, m in named if isinstance(m, spec)]
        elif callable(spec):
            hits = [n for n, m in named if spec(n, m)]
        else:
            raise MemlensError(
                f"layers: expected a name, a pattern, a module class or a predicate, got {spec!r}"
            )
        chosen.update(hits)
    if not chosen:
        raise MemlensError(f"layers={layers!r} selects no module of {type(model).__name__}")
    return [(n, m) for n, m in named if n in chosen]


def owned_parameters(
    model: Any, module_names: Iterable[str] | None = None
) -> list[tuple[str, str, Any]]:
    """(parameter name, owning module name, parameter) for the parameters watched.

    With ``module_names`` None (the default selection) that is every parameter of the model,
    owned by the module that holds it. Otherwise, parameters inside a chosen module: each
    belongs to the deepest chosen module that contains it, so choosing ``"encoder.layers.0"``
    watches every parameter of that block, and nothing twice.
    """
    if module_names is None:
        return [(n, n.rpartition(".")[0], p) for n, p in model.named_parameters()]
    chosen = sorted(set(module_names), key=len, reverse=True)
    out = []
    for pname, p in model.named_parameters():
        for name in chosen:
            if name == "" or pname.startswith(name + "."):
                out.append((pname, name, p))
                break
    return out

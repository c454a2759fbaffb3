"""The hooks installed for a sampled step, and the walk over the tensors a module handles.

``StepHooks`` registers them on every watched module (and parameter) when a step is
sampled and removes them all after it, so between samples training runs without them. A
hook never raises into training: every failure goes to ``sink.error`` and is skipped.
What a hook sees goes to a :class:`HookSink` (the Inspector): it decides what is kept.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from memlens.inspector.select import label

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.hooks import RemovableHandle


class HookSink(Protocol):
    """Where the hooks send what they see (the Inspector implements it)."""

    closed: bool
    sampled: bool

    def capture(self, key: str, module: str, kind: str, t: torch.Tensor) -> None: ...

    def captured(self, key: str) -> bool: ...

    def forward_output(self, module: str, nbytes: int, time_us: int) -> None: ...

    def error(self, exc: BaseException) -> None: ...


def tensors_in(
    obj: Any, prefix: str = "", depth: int = 0, limit: int = 16
) -> list[tuple[str, Any]]:
    """(suffix, tensor) for the tensors in a module's output: tensors, tuples, lists, dicts.

    Three levels deep and 16 tensors at most: a module returning a large structure (a cache,
    a list of per-head tensors) must not make one hook call cost more than the module."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    out: list[tuple[str, Any]] = []
    if depth >= 3:
        return out
    if isinstance(obj, dict) or (hasattr(obj, "items") and hasattr(obj, "keys")):
        items = [(str(k), v) for k, v in obj.items()]
    elif isinstance(obj, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(obj)]
    else:
        return out
    for k, v in items:
        out.extend(tensors_in(v, f"{prefix}.{k}", depth + 1, limit))
        if len(out) >= limit:
            return out[:limit]
    return out


class StepHooks:
    """The hooks of one sampled step: :meth:`install` at its start, :meth:`remove` at its end."""

    def __init__(
        self,
        sink: HookSink,
        modules: Sequence[tuple[str, nn.Module]],
        params: Sequence[tuple[str, str, torch.nn.Parameter]],
        params_by_module: Mapping[str, Sequence[tuple[str, torch.nn.Parameter]]],
        *,
        track: frozenset[str],
        backward: str,
    ) -> None:
        self.sink = sink
        self.modules = modules
        self.params = params
        self.params_by_module = params_by_module
        self.track = track
        self.backward = backward
        self._handles: list[RemovableHandle] = []

    def install(self) -> None:
        for name, mod in self.modules:
            # Always: outputs give the activation bytes even when they are not tracked.
            self._handles.append(mod.register_forward_hook(self._forward(name), with_kwargs=True))
            if self.backward == "full" and self.track & {"grad_output", "grad_input"}:
                self._handles.append(mod.register_full_backward_hook(self._full_backward(name)))
        if "grad" in self.track:
            for pname, owner, p in self.params:
                if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
                    self._handles.append(
                        p.register_post_accumulate_grad_hook(self._param_grad(pname, owner))
                    )

    def remove(self) -> None:
        for h in self._handles:
            with contextlib.suppress(Exception):
                h.remove()
        self._handles.clear()

    def _forward(self, name: str) -> Callable[..., None]:
        lab = label(name)
        track, sink = self.track, self.sink
        tensor_grads = self.backward == "tensor"

        def hook(
            module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any
        ) -> None:
            if sink.closed or not sink.sampled:
                return None
            try:
                outs = tensors_in(output)
                nbytes = sum(t.numel() * t.element_size() for _, t in outs)
                # the snapshot's clock (epoch µs), so memory views can place the forward pass
                sink.forward_output(lab, nbytes, int(time.time() * 1e6))
                for suffix, t in outs:
                    if "output" in track:
                        sink.capture(f"{lab}:output{suffix}", lab, "output", t)
                    if "grad_output" in track and tensor_grads:
                        self._on_grad(f"{lab}:grad_output{suffix}", lab, "grad_output", t)
                if track & {"input", "grad_input"}:
                    ins = tensors_in(tuple(args)) + tensors_in(dict(kwargs or {}))
                    for suffix, t in ins:
                        if "input" in track:
                            sink.capture(f"{lab}:input{suffix}", lab, "input", t)
                        if "grad_input" in track and tensor_grads:
                            self._on_grad(f"{lab}:grad_input{suffix}", lab, "grad_input", t)
                if "param" in track:
                    for pname, p in self.params_by_module.get(name, ()):
                        sink.capture(f"{pname}:param", lab, "param", p)
            except Exception as exc:
                sink.error(exc)
            return None

        return hook

    def _on_grad(self, key: str, lab: str, kind: str, t: torch.Tensor) -> None:
        """Capture ``t``'s gradient when backward reaches it (a hook on the tensor itself,
        which goes away with the tensor)."""
        sink = self.sink
        if not getattr(t, "requires_grad", False) or sink.captured(key):
            return

        def on_grad(g: torch.Tensor) -> None:
            if not sink.closed:
                try:
                    sink.capture(key, lab, kind, g)
                except Exception as exc:
                    sink.error(exc)
            return None

        t.register_hook(on_grad)

    def _full_backward(self, name: str) -> Callable[..., None]:
        lab = label(name)
        track, sink = self.track, self.sink

        def hook(module: nn.Module, grad_input: Any, grad_output: Any) -> None:
            if sink.closed:
                return None
            try:
                if "grad_output" in track:
                    for suffix, g in tensors_in(tuple(grad_output)):
                        sink.capture(f"{lab}:grad_output{suffix}", lab, "grad_output", g)
                if "grad_input" in track:
                    for suffix, g in tensors_in(tuple(grad_input)):
                        sink.capture(f"{lab}:grad_input{suffix}", lab, "grad_input", g)
            except Exception as exc:
                sink.error(exc)
            return None

        return hook

    def _param_grad(self, pname: str, owner: str) -> Callable[[torch.nn.Parameter], None]:
        lab = label(owner)
        track, sink = self.track, self.sink

        def hook(p: torch.nn.Parameter) -> None:
            if sink.closed or p.grad is None:
                return
            try:
                if "param" in track:  # if its module's forward hook did not run
                    sink.capture(f"{pname}:param", lab, "param", p)
                sink.capture(f"{pname}:grad", lab, "grad", p.grad)
            except Exception as exc:
                sink.error(exc)

        return hook

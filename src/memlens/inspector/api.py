"""``memlens.inspect``: watch activations, gradients and parameters while a model trains.

    ins = memlens.inspect(model, layers=None, every=20, out="runs/x")
    for batch in loader:
        ...train...
        ins.step()
    ins.close()

or ``with memlens.inspect(model, out="runs/x") as ins: ...``. See docs/inspect.md.

How it stays out of the way of training:

- Hooks are installed only for the steps that are sampled and removed after them; between
  samples the only hook left is one forward pre-hook on the model (it counts steps).
- What leaves a hook is detached and on its way to the CPU at once: small tensors copied,
  large ones reduced on their device first (``reduce.py``). On CUDA the copy is asynchronous
  into pinned memory; nothing waits for the GPU and no GPU tensor is kept.
- Samples go to a background process, one message per sampled step, through a bounded queue
  with a byte budget (``transport.py``); when it is full the samples are dropped and
  counted, never waited for.
- Any error in the inspector is caught, reported once, and never reaches the training loop.

This module is the Inspector's lifecycle: the run directory, steps and sampling, capture,
shutdown. The settings are ``config.InspectConfig``; the hooks are ``hooks.py``.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import os
import platform
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from memlens.inspector import store
from memlens.inspector.config import InspectConfig
from memlens.inspector.select import label, owned_parameters, select_modules
from memlens.inspector.steps import StepCounter
from memlens.keywords import show_fields

if TYPE_CHECKING:
    import torch
    from torch import nn

    from memlens.inspector.hooks import StepHooks
    from memlens.inspector.transport import Transport

LayerSpec = str | type | Callable[[str, Any], bool] | Iterable[Any] | None


def inspect(
    model: nn.Module,
    layers: LayerSpec = None,
    *,
    config: InspectConfig | None = None,
    **options: Any,
) -> Inspector:
    """Start inspecting ``model``; returns an :class:`Inspector` (also a context manager).

    - ``layers``: None for every leaf module, or names, globs, module classes or a
      predicate ``f(name, module)`` (see :func:`memlens.inspector.select.select_modules`).
    - Every other keyword is a field of :class:`memlens.inspector.InspectConfig`, where the
      defaults and their meaning are (``every=20``, ``out="runs/inspect"``, ``track``,
      ``render``, ...); ``config=`` passes a whole one, which the keywords then override.
    """
    return Inspector(model, layers, InspectConfig.from_options(config, options))


# help() and inspect.signature() show the real keywords and their defaults, from the one
# place they are written (the dataclass).
show_fields(inspect, InspectConfig, keep=3)  # model, layers, config


def _close_at_exit(ref: weakref.ref[Inspector]) -> None:
    ins = ref()
    if ins is None or ins.closed:
        return
    last = getattr(sys, "last_type", None) or getattr(sys, "last_exc", None)
    if last is not None and not isinstance(last, type):
        last = type(last)
    ins.close(status=_status(last))


def _status(exc_type: type[BaseException] | None) -> str:
    if exc_type is None:
        return "complete"
    if issubclass(exc_type, KeyboardInterrupt):
        return "interrupted"
    return "error"


class Inspector:
    """A running inspection. Call :meth:`step` once per training step and :meth:`close` at the
    end (or use it as a context manager; it is also closed at interpreter exit)."""

    def __init__(self, model: nn.Module, layers: LayerSpec, config: InspectConfig) -> None:
        import torch

        from memlens.inspector.hooks import StepHooks
        from memlens.inspector.transport import Transport
        from memlens.inspector.worker import worker_main

        self.model = model
        self.config = config
        self.out = config.out
        self._torch = torch

        self.modules = select_modules(model, layers)
        params_by_module: dict[str, list[tuple[str, Any]]] = collections.defaultdict(list)
        self._params: list[tuple[str, str, Any]] = []
        if config.track & {"param", "grad"}:
            self._params = owned_parameters(
                model, None if layers is None else [n for n, _ in self.modules]
            )
            for pname, owner, p in self._params:
                params_by_module[owner].append((pname, p))
        self._hooks: StepHooks = StepHooks(
            self,
            self.modules,
            self._params,
            params_by_module,
            track=config.track,
            backward=config.backward,
        )

        # step state
        self._steps = StepCounter(
            every=config.every, max_per_second=config.max_per_second, step_on=config.step_on
        )
        self.last_forward_step: int | None = None
        self.sampled = False
        self._captured: set[str] = set()
        self._act_bytes: dict[str, int] = {}
        self._step_time_us: int | None = None
        self._step_end_time_us: int | None = None  # the last forward output of the step
        self._lock = threading.RLock()
        self.capture_errors = 0
        self.closed = False
        self._warned: set[str] = set()

        self._prepare_dir(model)
        self._transport: Transport = Transport(
            worker_main,
            config.worker_settings(),
            queue_size=config.queue_size,
            max_bytes=config.max_queue_bytes,
        )
        self._root_handle = model.register_forward_pre_hook(self._on_root_forward)
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)
        self._begin_step()

    @property
    def step_index(self) -> int:
        return self._steps.index

    @property
    def samples_sent(self) -> int:
        return self._transport.sent

    @property
    def samples_dropped(self) -> int:
        return self._transport.dropped

    # -- run directory --------------------------------------------------------------------
    def _prepare_dir(self, model: nn.Module) -> None:
        cfg = self.config
        meta = {
            "format": store.FORMAT,
            "status": "running",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "model": type(model).__name__,
            "pid": os.getpid(),
            "every": cfg.every,
            "max_per_second": cfg.max_per_second,
            "track": sorted(cfg.track),
            "backward": cfg.backward,
            "bins": cfg.bins,
            "heatmap_size": cfg.heatmap_size,
            "modules": [label(n) for n, _ in self.modules],
            "parameters": [p for p, _, _ in self._params],
            "python": platform.python_version(),
            "torch": getattr(self._torch, "__version__", "?"),
        }
        store.start_run(self.out, meta)

    # -- steps ----------------------------------------------------------------------------
    def step(self) -> None:
        """Mark the end of a training step (call it once per optimizer step)."""
        if self.closed:
            return
        with self._lock:
            if self._steps.step_call_ends_step():
                self._advance()
            else:
                self._pump()

    def _advance(self, forwards: int = 0) -> None:
        self._end_step()
        self._steps.advance(forwards)
        self._begin_step()

    def _on_root_forward(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        if self.closed:
            return
        with self._lock:
            if self._steps.forward_ends_step():
                self._advance(forwards=1)
            self.last_forward_step = self.step_index

    def _begin_step(self) -> None:
        self._pump()
        now = self._steps.due()
        if now is None:
            return
        if not self._transport.alive():
            self._warn_once("dead", "memlens inspect: the background process is gone; not sampling")
            return
        self._steps.taken(now)
        self.sampled = True
        self._captured.clear()
        self._act_bytes = {}
        self._step_time_us = None
        self._step_end_time_us = None
        try:
            self._hooks.install()
        except Exception as exc:  # never break training
            self._hooks.remove()
            self.error(exc)

    def _end_step(self) -> None:
        if not self.sampled:
            return
        try:
            if (
                "param" in self.config.track and self._steps.forwards
            ):  # params whose module never ran
                for pname, owner, p in self._params:
                    self.capture(f"{pname}:param", label(owner), "param", p)
        except Exception as exc:
            self.error(exc)
        self.sampled = False
        self._hooks.remove()
        self._pump()  # also sends the step's samples
        if self._act_bytes:
            times = (self._step_time_us, self._step_end_time_us)
            self._transport.send(("bytes", self.step_index, *times, dict(self._act_bytes)))

    # -- what the hooks call (hooks.HookSink) ---------------------------------------------
    def captured(self, key: str) -> bool:
        return key in self._captured

    def forward_output(self, module: str, nbytes: int, time_us: int) -> None:
        self._act_bytes[module] = self._act_bytes.get(module, 0) + nbytes
        self._step_end_time_us = time_us
        if self._step_time_us is None:
            self._step_time_us = time_us

    def capture(self, key: str, module: str, kind: str, t: torch.Tensor) -> None:
        """Start ``t`` on its way to the CPU, once per key and step, unless there is no room."""
        from memlens.inspector.reduce import prepare, trackable

        with self._lock:
            if key in self._captured or not trackable(t):
                return
            self._captured.add(key)
            if not self._transport.admit():
                return
            cfg = self.config
            pending = prepare(
                t,
                bins=cfg.bins,
                heatmap_size=cfg.heatmap_size,
                raw_max_numel=cfg.raw_max_for(t.device.type),
                chunk_numel=cfg.chunk_numel,
                hist_max_numel=cfg.hist_max_numel,
            )
            meta = {
                "step": self.step_index,
                "time": time.time(),
                "shape": tuple(t.shape),
                "dtype": str(t.dtype).replace("torch.", ""),
                "numel": t.numel(),
                "bytes": t.numel() * t.element_size(),
                "device": str(t.device),
            }
            self._transport.add((key, module, kind, meta), pending)
            self._pump()

    def error(self, exc: BaseException) -> None:
        self.capture_errors += 1
        self._warn_once(
            "capture",
            f"memlens inspect: a capture failed and was skipped ({type(exc).__name__}: {exc})",
        )

    def _pump(self, wait: bool = False) -> None:
        # Samples of a step leave together once it is over: one message per sampled step.
        self._transport.pump(wait=wait, flush=not self.sampled)

    def _warn_once(self, tag: str, text: str) -> None:
        if tag not in self._warned:
            self._warned.add(tag)
            print(text, file=sys.stderr, flush=True)

    # -- end ------------------------------------------------------------------------------
    def close(self, status: str = "complete") -> None:
        """Stop sampling, let the background process finish its files, and wait for it
        (at most ``close_timeout`` seconds; then it is terminated). Safe to call twice."""
        with self._lock:
            if self.closed:
                return
            try:
                self._end_step()
                self._pump(wait=True)
            except Exception as exc:
                self.error(exc)
            self.closed = True
        with contextlib.suppress(Exception):
            self._root_handle.remove()
        self._hooks.remove()
        clean = False
        info = {
            "last_step": self.last_forward_step,
            "samples_sent": self.samples_sent,
            "dropped": self.samples_dropped,
            "capture_errors": self.capture_errors,
            "end_reason": status,
        }
        timeout = self.config.close_timeout
        try:
            clean = self._transport.stop(("stop", status, info, self.config.render), timeout)
            if self._transport.alive():
                print(
                    f"memlens inspect: the background process did not finish in "
                    f"{timeout:.0f}s; stopping it (statistics are saved; "
                    f"`memlens inspect-report {self.out}` rebuilds the pages and videos)",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            # Reached on a second Ctrl-C too: the child never outlives this call.
            self._transport.kill()
            if not clean:
                store.mark_unfinished(self.out, status, info)
            with contextlib.suppress(Exception):
                atexit.unregister(self._atexit)
        where = self.out / "dashboard.html"
        print(
            f"memlens inspect: {self.samples_sent} samples sent, {self.samples_dropped} dropped, "
            f"last step {self.last_forward_step}"
            + (f" -> {where}" if where.exists() else f" -> {self.out}"),
            file=sys.stderr,
            flush=True,
        )

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(status=_status(exc_type))

    def __del__(self) -> None:  # pragma: no cover - last resort only
        if not getattr(self, "closed", True):
            with contextlib.suppress(Exception):
                warnings.warn("memlens inspector was never closed", ResourceWarning, stacklevel=1)

    def __repr__(self) -> str:
        return (
            f"<Inspector {len(self.modules)} modules, step {self.step_index}, "
            f"{self.samples_sent} sent, {self.samples_dropped} dropped, out={str(self.out)!r}>"
        )

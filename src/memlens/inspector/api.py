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
  with a byte budget; when it is full the samples are dropped and counted, never waited for.
- Any error in the inspector is caught, reported once, and never reaches the training loop.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import json
import math
import os
import platform
import queue
import shutil
import signal
import sys
import threading
import time
import types
import warnings
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError
from memlens.inspect import store
from memlens.inspect.select import label, owned_parameters, select_modules

KINDS = ("output", "input", "grad_output", "grad_input", "param", "grad")
DEFAULT_TRACK = ("output", "param", "grad")
RAW_MAX_NUMEL = {"cpu": 1 << 12}
RAW_MAX_NUMEL_DEVICE = 1 << 16
MAX_PENDING = 1024
_OUR_FILES = (
    "meta.json",
    "activation_bytes.jsonl",
    "annotations.json",
    "alerts.jsonl",
    "dashboard.html",
)
_OUR_DIRS = ("tensors", "plots", "videos")


def inspect(
    model,
    layers: str | type | Callable | Iterable | None = None,
    *,
    every: int | None = 20,
    max_per_second: float | None = None,
    out: str | os.PathLike = "runs/inspect",
    track: Iterable[str] | str = DEFAULT_TRACK,
    backward: str = "tensor",
    step_on: str = "auto",
    bins: int = 64,
    heatmap_size: int = 64,
    raw_max_numel: int | None = None,
    hist_max_numel: int | None = 1 << 14,
    chunk_numel: int = 1 << 22,
    queue_size: int = 1024,
    max_queue_bytes: int = 256 << 20,
    alerts: dict | None = None,
    video_format: str = "auto",
    fps: int = 8,
    live_every_s: float = 60.0,
    render: str = "all",
    close_timeout: float = 120.0,
    nice: int = 10,
) -> Inspector:
    """Start inspecting ``model``; returns an :class:`Inspector` (also a context manager).

    - ``layers``: None for every leaf module, or names, globs, module classes or a
      predicate ``f(name, module)`` (see :func:`memlens.inspect.select.select_modules`).
    - ``every``: sample one step in ``every`` (steps 0, every, 2*every, ...); None for no
      step-count limit. ``max_per_second``: sample at most that many steps per second.
    - ``track``: any of "output", "input", "grad_output", "grad_input", "param", "grad"
      (parameter gradients), or "all". Default: outputs, parameters and parameter
      gradients ("grad_output" doubles the activation data to reduce; add it when needed).
    - ``hist_max_numel``: CPU tensors larger than this get their histogram from an evenly
      strided subset of about this many elements (all other statistics stay exact); None
      for exact histograms everywhere. Tensors on an accelerator are always exact.
    - ``backward``: "tensor" (default) takes gradients with tensor hooks on the module's
      outputs and inputs, which is safe with in-place operations after the module; "full"
      uses ``register_full_backward_hook`` (the module's own grad_input/grad_output), which
      makes PyTorch raise if a hooked module's output is later modified in place.
    - ``step_on``: "auto" (each forward call of ``model`` is a step until ``step()`` is first
      called, then only ``step()``), "call" (only ``step()``) or "forward".
    - ``out``: the run directory (earlier inspector files in it are replaced).
    - ``nice``: added to the background process's niceness (POSIX), so it gets the CPU
      time training leaves over; 0 to leave it alone.
    - ``render``: what the background process renders when the run ends: "all" (dashboard,
      PNG plots, videos), "dashboard" or "none". ``memlens inspect-report`` rebuilds any of it.
    """
    return Inspector(
        model,
        layers,
        every=every,
        max_per_second=max_per_second,
        out=out,
        track=track,
        backward=backward,
        step_on=step_on,
        bins=bins,
        heatmap_size=heatmap_size,
        raw_max_numel=raw_max_numel,
        hist_max_numel=hist_max_numel,
        chunk_numel=chunk_numel,
        queue_size=queue_size,
        max_queue_bytes=max_queue_bytes,
        alerts=alerts,
        video_format=video_format,
        fps=fps,
        live_every_s=live_every_s,
        render=render,
        close_timeout=close_timeout,
        nice=nice,
    )


def _tensors_in(
    obj: Any, prefix: str = "", depth: int = 0, limit: int = 16
) -> list[tuple[str, Any]]:
    """(suffix, tensor) for the tensors in a module's output: tensors, tuples, lists, dicts."""
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
        out.extend(_tensors_in(v, f"{prefix}.{k}", depth + 1, limit))
        if len(out) >= limit:
            return out[:limit]
    return out


@contextlib.contextmanager
def _spawn_without_main():
    """Start a spawn child without re-running the user's script in it.

    ``spawn`` normally imports the parent's ``__main__`` in the child (as ``__mp_main__``), so
    a training script without an ``if __name__ == "__main__"`` guard would train again there.
    The worker needs nothing from ``__main__``; hide it for the moment the child is started.
    """
    real = sys.modules.get("__main__")
    stub = types.ModuleType("__main__")
    sys.modules["__main__"] = stub
    try:
        yield
    finally:
        if real is not None:
            sys.modules["__main__"] = real


@contextlib.contextmanager
def _sigint_ignored():
    """Ignore SIGINT while the child is started: it inherits the disposition through exec, so
    a Ctrl-C that reaches the process group while it is still importing cannot kill it."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to change
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _close_at_exit(ref: weakref.ref) -> None:
    ins = ref()
    if ins is None or ins.closed:
        return
    last = getattr(sys, "last_type", None) or getattr(sys, "last_exc", None)
    if last is not None and not isinstance(last, type):
        last = type(last)
    if last is None:
        status = "complete"
    elif issubclass(last, KeyboardInterrupt):
        status = "interrupted"
    else:
        status = "error"
    ins.close(status=status)


class Inspector:
    """A running inspection. Call :meth:`step` once per training step and :meth:`close` at the
    end (or use it as a context manager; it is also closed at interpreter exit)."""

    def __init__(
        self,
        model,
        layers=None,
        *,
        every,
        max_per_second,
        out,
        track,
        backward,
        step_on,
        bins,
        heatmap_size,
        raw_max_numel,
        chunk_numel,
        queue_size,
        hist_max_numel=1 << 14,
        max_queue_bytes,
        alerts,
        video_format,
        fps,
        live_every_s,
        render,
        close_timeout,
        nice=10,
    ):
        import multiprocessing as mp

        import torch

        from memlens.inspect.alerts import AlertConfig
        from memlens.inspect.worker import worker_main

        if every is not None and int(every) < 1:
            raise MemlensError("every must be a positive number of steps (or None)")
        if max_per_second is not None and not max_per_second > 0:
            raise MemlensError("max_per_second must be positive (or None)")
        if every is None and max_per_second is None:
            every = 1
        kinds = KINDS if track == "all" else (track,) if isinstance(track, str) else tuple(track)
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise MemlensError(
                f"track: unknown kind(s) {bad}; choose from {', '.join(KINDS)} or 'all'"
            )
        if backward not in ("tensor", "full"):
            raise MemlensError("backward must be 'tensor' or 'full'")
        if step_on not in ("auto", "call", "forward"):
            raise MemlensError("step_on must be 'auto', 'call' or 'forward'")
        if render not in ("all", "dashboard", "none"):
            raise MemlensError("render must be 'all', 'dashboard' or 'none'")
        if video_format not in ("auto", "mp4", "gif"):
            raise MemlensError("video_format must be 'auto', 'mp4' or 'gif'")
        alert_cfg = AlertConfig(**(alerts or {}))  # validates the keys now, in the caller

        self.model = model
        self.every = None if every is None else int(every)
        self.max_per_second = max_per_second
        self.track = frozenset(kinds)
        self.backward = backward
        self.step_on = step_on
        self.bins, self.heatmap_size = int(bins), int(heatmap_size)
        self.raw_max_numel, self.chunk_numel = raw_max_numel, int(chunk_numel)
        self.hist_max_numel = hist_max_numel
        self.max_queue_bytes = int(max_queue_bytes)
        self.close_timeout = float(close_timeout)
        self.render_mode = render
        self.out = Path(out)
        self._torch = torch

        self.modules = select_modules(model, layers)
        self._params_by_module: dict[str, list[tuple[str, Any]]] = collections.defaultdict(list)
        self._params: list[tuple[str, str, Any]] = []
        if self.track & {"param", "grad"}:
            self._params = owned_parameters(
                model, None if layers is None else [n for n, _ in self.modules]
            )
            for pname, owner, p in self._params:
                self._params_by_module[owner].append((pname, p))

        # step state
        self.step_index = 0
        self.sampled = False
        self._manual = step_on == "call"
        self._forwards = 0
        self.last_forward_step: int | None = None
        self._last_sample_t = -math.inf
        self._captured: set[str] = set()
        self._act_bytes: dict[str, int] = {}
        self._step_time_us: int | None = None
        self._step_end_time_us: int | None = None  # the last forward output of the step
        self._handles: list = []
        self._pending: collections.deque = collections.deque()
        self._outbox: list = []
        self._outbox_bytes = 0
        self._lock = threading.RLock()
        # counters
        self.samples_sent = 0
        self.samples_dropped = 0
        self.capture_errors = 0
        self.closed = False
        self._warned: set[str] = set()

        self._prepare_dir(model)
        cfg = {
            "out": str(self.out),
            "bins": self.bins,
            "heatmap_size": self.heatmap_size,
            "alerts": alert_cfg.__dict__,
            "video_format": video_format,
            "fps": int(fps),
            "live_every_s": float(live_every_s),
            "nice": int(nice),
        }
        ctx = mp.get_context("spawn")
        self._q = ctx.Queue(maxsize=int(queue_size))
        self._inflight = ctx.Value("q", 0)
        self._proc = ctx.Process(
            target=worker_main,
            args=(self._q, self._inflight, cfg),
            name="memlens-inspect",
            daemon=True,
        )
        with _spawn_without_main(), _sigint_ignored():
            self._proc.start()
        self._root_handle = model.register_forward_pre_hook(self._on_root_forward)
        self._atexit = functools.partial(_close_at_exit, weakref.ref(self))
        atexit.register(self._atexit)
        self._begin_step()

    # -- run directory --------------------------------------------------------------------
    def _prepare_dir(self, model) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        if (self.out / "meta.json").exists():
            for name in _OUR_FILES:
                with contextlib.suppress(FileNotFoundError):
                    (self.out / name).unlink()
            for name in _OUR_DIRS:
                shutil.rmtree(self.out / name, ignore_errors=True)
        meta = {
            "format": store.FORMAT,
            "status": "running",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "model": type(model).__name__,
            "pid": os.getpid(),
            "every": self.every,
            "max_per_second": self.max_per_second,
            "track": sorted(self.track),
            "backward": self.backward,
            "bins": self.bins,
            "heatmap_size": self.heatmap_size,
            "modules": [label(n) for n, _ in self.modules],
            "parameters": [p for p, _, _ in self._params],
            "python": platform.python_version(),
            "torch": getattr(self._torch, "__version__", "?"),
        }
        store.atomic_write_json(self.out / "meta.json", meta)

    # -- steps ----------------------------------------------------------------------------
    def step(self) -> None:
        """Mark the end of a training step (call it once per optimizer step)."""
        if self.closed:
            return
        with self._lock:
            if self.step_on == "auto":
                self._manual = True
            if self.step_on == "forward":
                self._pump()
                return
            self._advance()

    def _advance(self) -> None:
        self._end_step()
        self.step_index += 1
        self._forwards = 0
        self._begin_step()

    def _on_root_forward(self, module, args) -> None:
        if self.closed:
            return
        with self._lock:
            self._forwards += 1
            if not self._manual and self._forwards > 1:
                self._advance()
                self._forwards = 1
            self.last_forward_step = self.step_index

    def _begin_step(self) -> None:
        self._pump()
        if self.every is not None and self.step_index % self.every:
            return
        now = time.monotonic()
        if (
            self.max_per_second is not None
            and now - self._last_sample_t < 1.0 / self.max_per_second
        ):
            return
        if not self._proc.is_alive():
            self._warn_once("dead", "memlens inspect: the background process is gone; not sampling")
            return
        self._last_sample_t = now
        self.sampled = True
        self._captured.clear()
        self._act_bytes = {}
        self._step_time_us = None
        self._step_end_time_us = None
        try:
            self._install()
        except Exception as exc:  # never break training
            self._remove()
            self._error(exc)

    def _end_step(self) -> None:
        if not self.sampled:
            return
        try:
            if "param" in self.track and self._forwards:  # parameters whose module never ran
                for pname, owner, p in self._params:
                    self._capture(f"{pname}:param", label(owner), "param", p)
        except Exception as exc:
            self._error(exc)
        self.sampled = False
        self._remove()
        self._pump()  # also sends the step's samples
        if self._act_bytes:
            times = (self._step_time_us, self._step_end_time_us)
            self._send(("bytes", self.step_index, *times, dict(self._act_bytes)), 0)

    # -- hooks ----------------------------------------------------------------------------
    def _install(self) -> None:
        for name, mod in self.modules:
            # Always: outputs give the activation bytes even when they are not tracked.
            self._handles.append(mod.register_forward_hook(self._fwd_hook(name), with_kwargs=True))
            if self.backward == "full" and self.track & {"grad_output", "grad_input"}:
                self._handles.append(mod.register_full_backward_hook(self._full_bwd_hook(name)))
        if "grad" in self.track:
            for pname, owner, p in self._params:
                if p.requires_grad and hasattr(p, "register_post_accumulate_grad_hook"):
                    self._handles.append(
                        p.register_post_accumulate_grad_hook(self._grad_hook(pname, owner))
                    )

    def _remove(self) -> None:
        for h in self._handles:
            with contextlib.suppress(Exception):
                h.remove()
        self._handles.clear()

    def _fwd_hook(self, name: str):
        lab = label(name)
        track = self.track

        def hook(module, args, kwargs, output):
            if self.closed or not self.sampled:
                return None
            try:
                outs = _tensors_in(output)
                nbytes = sum(t.numel() * t.element_size() for _, t in outs)
                self._act_bytes[lab] = self._act_bytes.get(lab, 0) + nbytes
                # the snapshot's clock (epoch µs), so memory views can place the forward pass
                self._step_end_time_us = int(time.time() * 1e6)
                if self._step_time_us is None:
                    self._step_time_us = self._step_end_time_us
                for suffix, t in outs:
                    if "output" in track:
                        self._capture(f"{lab}:output{suffix}", lab, "output", t)
                    if "grad_output" in track and self.backward == "tensor":
                        self._grad_tensor_hook(f"{lab}:grad_output{suffix}", lab, "grad_output", t)
                if track & {"input", "grad_input"}:
                    ins = _tensors_in(tuple(args)) + _tensors_in(dict(kwargs or {}))
                    for suffix, t in ins:
                        if "input" in track:
                            self._capture(f"{lab}:input{suffix}", lab, "input", t)
                        if "grad_input" in track and self.backward == "tensor":
                            self._grad_tensor_hook(
                                f"{lab}:grad_input{suffix}", lab, "grad_input", t
                            )
                if "param" in track:
                    for pname, p in self._params_by_module.get(name, ()):
                        self._capture(f"{pname}:param", lab, "param", p)
            except Exception as exc:
                self._error(exc)
            return None

        return hook

    def _grad_tensor_hook(self, key: str, lab: str, kind: str, t) -> None:
        if not getattr(t, "requires_grad", False) or key in self._captured:
            return

        def on_grad(g):
            if not self.closed:
                try:
                    self._capture(key, lab, kind, g)
                except Exception as exc:
                    self._error(exc)
            return None

        t.register_hook(on_grad)

    def _full_bwd_hook(self, name: str):
        lab = label(name)

        def hook(module, grad_input, grad_output):
            if self.closed:
                return None
            try:
                if "grad_output" in self.track:
                    for suffix, g in _tensors_in(tuple(grad_output)):
                        self._capture(f"{lab}:grad_output{suffix}", lab, "grad_output", g)
                if "grad_input" in self.track:
                    for suffix, g in _tensors_in(tuple(grad_input)):
                        self._capture(f"{lab}:grad_input{suffix}", lab, "grad_input", g)
            except Exception as exc:
                self._error(exc)
            return None

        return hook

    def _grad_hook(self, pname: str, owner: str):
        lab = label(owner)

        def hook(p):
            if self.closed or p.grad is None:
                return
            try:
                if "param" in self.track:  # if its module's forward hook did not run
                    self._capture(f"{pname}:param", lab, "param", p)
                self._capture(f"{pname}:grad", lab, "grad", p.grad)
            except Exception as exc:
                self._error(exc)

        return hook

    # -- capture and send -----------------------------------------------------------------
    def _capture(self, key: str, module: str, kind: str, t) -> None:
        from memlens.inspect.reduce import prepare, trackable

        with self._lock:
            if key in self._captured or not trackable(t):
                return
            self._captured.add(key)
            if self._inflight.value >= self.max_queue_bytes or len(self._pending) >= MAX_PENDING:
                self.samples_dropped += 1
                return
            raw_max = self.raw_max_numel
            if raw_max is None:
                raw_max = RAW_MAX_NUMEL.get(t.device.type, RAW_MAX_NUMEL_DEVICE)
            pending = prepare(
                t,
                bins=self.bins,
                heatmap_size=self.heatmap_size,
                raw_max_numel=raw_max,
                chunk_numel=self.chunk_numel,
                hist_max_numel=self.hist_max_numel,
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
            self._pending.append((key, module, kind, meta, pending))
            self._pump()

    def _pump(self, wait: bool = False) -> None:
        """Send every payload whose copy to the CPU has finished (in order)."""
        while self._pending:
            key, module, kind, meta, pending = self._pending[0]
            if not pending.ready():
                if not wait:
                    return
                pending.wait()
            self._pending.popleft()
            self._send(("sample", key, module, kind, meta, pending.payload()), pending.nbytes)
        if not self.sampled:
            self._flush_outbox()

    def _send(self, msg: tuple, nbytes: int) -> None:
        """Samples wait in the outbox and leave as one message per sampled step."""
        if msg[0] != "sample":
            self._put(msg, 0, 0)
            return
        if self._inflight.value + self._outbox_bytes + nbytes > self.max_queue_bytes:
            self.samples_dropped += 1
            return
        self._outbox.append(msg)
        self._outbox_bytes += nbytes
        if len(self._outbox) >= MAX_PENDING:
            self._flush_outbox()

    def _flush_outbox(self) -> None:
        if not self._outbox:
            return
        batch, nbytes = self._outbox, self._outbox_bytes
        self._outbox, self._outbox_bytes = [], 0
        self._put(("batch", batch), nbytes, len(batch))

    def _put(self, msg: tuple, nbytes: int, samples: int) -> None:
        try:
            self._q.put_nowait(msg)
        except queue.Full:
            self.samples_dropped += samples
            return
        except (ValueError, OSError, AssertionError):  # queue closed
            return
        if nbytes:
            with self._inflight.get_lock():
                self._inflight.value += nbytes
        self.samples_sent += samples

    def _warn_once(self, tag: str, text: str) -> None:
        if tag not in self._warned:
            self._warned.add(tag)
            print(text, file=sys.stderr, flush=True)

    def _error(self, exc: BaseException) -> None:
        self.capture_errors += 1
        self._warn_once(
            "capture",
            f"memlens inspect: a capture failed and was skipped ({type(exc).__name__}: {exc})",
        )

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
                self._error(exc)
            self.closed = True
        with contextlib.suppress(Exception):
            self._root_handle.remove()
        self._remove()
        clean = False
        info = {
            "last_step": self.last_forward_step,
            "samples_sent": self.samples_sent,
            "dropped": self.samples_dropped,
            "capture_errors": self.capture_errors,
            "end_reason": status,
        }
        try:
            if self._proc.is_alive():
                with contextlib.suppress(queue.Full):
                    self._q.put(("stop", status, info, self.render_mode), timeout=10)
                self._proc.join(self.close_timeout)
                clean = not self._proc.is_alive() and self._proc.exitcode == 0
                if self._proc.is_alive():
                    print(
                        f"memlens inspect: the background process did not finish in "
                        f"{self.close_timeout:.0f}s; stopping it (statistics are saved; "
                        f"`memlens inspect-report {self.out}` rebuilds the pages and videos)",
                        file=sys.stderr,
                        flush=True,
                    )
        finally:
            # Reached on a second Ctrl-C too: the child never outlives this call.
            if self._proc.is_alive():
                self._proc.terminate()
                self._proc.join(5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(5)
            self._q.cancel_join_thread()
            self._q.close()
            if not clean:
                self._mark_unfinished(status, info)
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

    def _mark_unfinished(self, status: str, info: dict) -> None:
        path = self.out / "meta.json"
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        if meta.get("status") in (None, "running"):
            meta.update(info)
            meta["status"] = "interrupted" if status == "complete" else status
            meta["end_reason"] = f"{status}; background process did not finish"
        else:
            meta["rendering"] = "incomplete: run `memlens inspect-report` on this directory"
        with contextlib.suppress(OSError, ValueError):
            store.atomic_write_json(path, meta)

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            status = "complete"
        elif issubclass(exc_type, KeyboardInterrupt):
            status = "interrupted"
        else:
            status = "error"
        self.close(status=status)

    def __del__(self) -> None:  # pragma: no cover - last resort only
        if not getattr(self, "closed", True):
            with contextlib.suppress(Exception):
                warnings.warn("memlens inspector was never closed", ResourceWarning, stacklevel=1)

    def __repr__(self) -> str:
        return (
            f"<Inspector {len(self.modules)} modules, step {self.step_index}, "
            f"{self.samples_sent} sent, {self.samples_dropped} dropped, out={str(self.out)!r}>"
        )

"""`memlens.dump_on_oom(dir)`: when CUDA runs out of memory, keep the evidence.

PyTorch calls out-of-memory observers (`torch._C._cuda_attach_out_of_memory_observer`) inside
the failing allocation, after the allocator has recorded the `oom` trace entry and released
its lock, and before `torch.OutOfMemoryError` unwinds the stack and frees the tensors that
were live. A snapshot taken there shows memory exactly as it was when the allocation failed.
Observers cannot be detached, so memlens attaches one dispatcher per backend and routes it to
the dumpers that are still open.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from memlens.capture import session
from memlens.capture.backend import (
    DEFAULT_MAX_ENTRIES,
    Backend,
    RecordSettings,
    get_backend,
    require_available,
)
from memlens.capture.output import dump_snapshot, prepare_output

log = logging.getLogger("memlens.record")


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


class OomDumper:
    """Writes a snapshot when an OOM is observed; `close()` stops it (and the recording it
    started, if any)."""

    def __init__(
        self,
        backend: Backend,
        path_for: Callable[[int], Path],
        *,
        once: bool = True,
        token: session.Token | None = None,
    ) -> None:
        self.backend = backend
        self.path_for = path_for
        self.once = once
        self.paths: list[Path] = []
        self.closed = False
        self._token = token
        self._lock = threading.Lock()

    def __call__(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        # Runs inside torch's allocator: it must never raise.
        with self._lock:
            if self.closed or (self.once and self.paths):
                return
            path = self.path_for(len(self.paths) + 1)
            try:
                dump_snapshot(self.backend, path)
            except Exception as exc:
                log.error("memlens: CUDA out of memory, but the snapshot failed: %s", exc)
                return
            self.paths.append(path)
        log.warning(
            "memlens: CUDA out of memory on device %s (tried to allocate %s, %s free); "
            "snapshot written to %s; view it with: memlens view %s",
            device,
            _gib(alloc),
            _gib(device_free),
            path,
            path,
        )

    def close(self) -> None:
        with self._lock:
            self.closed = True
        if self._token is not None:
            session.end(self._token)
            self._token = None

    def __enter__(self) -> OomDumper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_dispatch_lock = threading.Lock()
_dumpers: list[OomDumper] = []
_attached: list[Backend] = []


def _dispatch(device: int, alloc: int, device_allocated: int, device_free: int) -> None:
    for dumper in list(_dumpers):
        if not dumper.closed:
            dumper(device, alloc, device_allocated, device_free)


def watch(dumper: OomDumper) -> OomDumper:
    """Route OOMs on the dumper's backend to it (attaching the observer once per backend).
    Raises RecordError where the PyTorch build has no OOM observer."""
    with _dispatch_lock:
        if not any(b is dumper.backend for b in _attached):
            dumper.backend.attach_oom_observer(_dispatch)
            _attached.append(dumper.backend)
        _dumpers[:] = [d for d in _dumpers if not d.closed]
        _dumpers.append(dumper)
    return dumper


def _oom_filename(n: int) -> str:
    rank = os.environ.get("RANK")
    who = f"rank{rank}_pid{os.getpid()}" if rank is not None else f"pid{os.getpid()}"
    return f"oom_{who}_{n}.pickle"


def dump_on_oom(
    directory: str | os.PathLike[str] = "memlens-oom",
    *,
    once: bool = True,
    record: bool = True,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    stacks: str = "python",
    context: str | None = "all",
) -> OomDumper:
    """On a CUDA out-of-memory error, write a snapshot into `directory` and log its path.

        memlens.dump_on_oom("oom-snapshots/")
        train()   # an OOM leaves oom-snapshots/oom_pid1234_1.pickle, with its `oom` entry

    Files are named `oom_pid<PID>_<N>.pickle` (`oom_rank<RANK>_pid<PID>_<N>.pickle` when the
    RANK environment variable is set, as torchrun does). Only the first OOM of the process
    is dumped unless `once=False`.

    With `record=True` (default) CUDA memory history recording is switched on now (same
    settings as `memlens.record`), so the snapshot holds the events leading up to the OOM;
    it stays on until `.close()` is called on the returned object. With `record=False`
    memlens relies on recording you started; without any, the snapshot has only the
    allocator's segments. No HTML report is written here: run `memlens report PATH`.
    """
    backend = get_backend()
    require_available(backend)
    folder = Path(directory).expanduser()
    # Prove the folder is writable now, not in the middle of an OOM.
    prepare_output(folder / _oom_filename(1))
    token = None
    if record and session.active_settings(backend) is None and not backend.history_enabled():
        token = session.begin(RecordSettings(max_entries, stacks, context), backend)
    dumper = OomDumper(backend, lambda n: folder / _oom_filename(n), once=once, token=token)
    try:
        return watch(dumper)
    except BaseException:
        dumper.close()
        raise


def _reset_for_tests() -> None:
    with _dispatch_lock:
        _dumpers.clear()
        _attached.clear()

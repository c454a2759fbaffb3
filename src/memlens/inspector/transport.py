"""Getting samples to the background process without ever making training wait.

A sample is first *pending* (its copy to the CPU may still be running), then in the
*outbox* (ready, waiting for the end of the sampled step), then one ``("batch", [...])``
message on a bounded ``multiprocessing`` queue. Two limits bound memory: ``max_queue_bytes``
of payload in flight (the worker subtracts what it has consumed from the shared counter)
and ``MAX_PENDING`` samples waiting; past either, samples are dropped and counted. The
queue is never waited on except at ``stop``.
"""

from __future__ import annotations

import collections
import contextlib
import queue
import signal
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

# Samples waiting for their CPU copy, or in one step's outbox, at most.
MAX_PENDING = 1024


@contextlib.contextmanager
def _spawn_without_main() -> Iterator[None]:
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
def _sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while the child is started: it inherits the disposition through exec, so
    a Ctrl-C that reaches the process group while it is still importing cannot kill it."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to change
        yield
        return
    try:
        yield
    finally:
        # None: the handler was set outside Python and cannot be put back; Python's own
        # (KeyboardInterrupt) rather than leaving Ctrl-C ignored for the rest of the run
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)


class Transport:
    """The queue to one background process, its byte budget and the sample counters."""

    def __init__(
        self,
        target: Callable[..., None],
        settings: dict[str, Any],
        *,
        queue_size: int,
        max_bytes: int,
    ) -> None:
        import multiprocessing as mp

        self.max_bytes = max_bytes
        self.sent = 0
        self.dropped = 0
        self._pending: collections.deque[tuple[tuple[Any, ...], Any]] = collections.deque()
        self._outbox: list[tuple[Any, ...]] = []
        self._outbox_bytes = 0
        ctx = mp.get_context("spawn")
        self._q = ctx.Queue(maxsize=queue_size)
        self._inflight = ctx.Value("q", 0)  # payload bytes sent and not yet consumed
        self.proc = ctx.Process(
            target=target,
            args=(self._q, self._inflight, settings),
            name="memlens-inspect",
            daemon=True,
        )
        with _spawn_without_main(), _sigint_ignored():
            self.proc.start()

    def alive(self) -> bool:
        return self.proc.is_alive()

    def admit(self) -> bool:
        """Is there room for one more sample? If not it is counted as dropped, and should
        not even be copied."""
        if self._inflight.value >= self.max_bytes or len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            return False
        return True

    def add(self, head: tuple[Any, ...], pending: Any) -> None:
        """Queue a sample whose payload ``pending`` (``reduce.Pending``) may still be copying;
        its message is ``("sample", *head, payload)``."""
        self._pending.append((head, pending))

    def pump(self, *, wait: bool = False, flush: bool = True) -> None:
        """Move every sample whose copy has finished (in order) to the outbox; ``wait`` for the
        unfinished ones too. ``flush`` sends the outbox (done once the step is over)."""
        while self._pending:
            head, pending = self._pending[0]
            if not pending.ready():
                if not wait:
                    break
                pending.wait()
            self._pending.popleft()
            self._to_outbox(("sample", *head, pending.payload()), pending.nbytes)
        if flush:
            self._flush_outbox()

    def send(self, msg: tuple[Any, ...]) -> None:
        """A control message (no payload budget, never batched)."""
        self._put(msg, 0, 0)

    def _to_outbox(self, msg: tuple[Any, ...], nbytes: int) -> None:
        if self._inflight.value + self._outbox_bytes + nbytes > self.max_bytes:
            self.dropped += 1
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

    def _put(self, msg: tuple[Any, ...], nbytes: int, samples: int) -> None:
        try:
            self._q.put_nowait(msg)
        except queue.Full:
            self.dropped += samples
            return
        except (ValueError, OSError, AssertionError):  # queue closed
            return
        if nbytes:
            with self._inflight.get_lock():
                self._inflight.value += nbytes
        self.sent += samples

    def stop(self, msg: tuple[Any, ...], timeout: float) -> bool:
        """Send the last message and wait up to ``timeout`` s for the process to finish.
        True when it ended cleanly; False when it failed or is still running (then the
        caller reports it and calls :meth:`kill`)."""
        if not self.proc.is_alive():
            return False
        with contextlib.suppress(queue.Full):
            self._q.put(msg, timeout=10)
        self.proc.join(timeout)
        return not self.proc.is_alive() and self.proc.exitcode == 0

    def kill(self) -> None:
        """Make sure the process is gone and release the queue (never blocks for long)."""
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self._q.cancel_join_thread()
        self._q.close()

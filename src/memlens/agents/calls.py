"""Each MCP tool call in its own thread: a slow call never holds the others, a cancelled or
timed-out call is stopped, and at most `slots` calls run at once.

A call runs `work` in a new daemon thread (never a pooled one: stopping it must not touch
the next job). Stopping it raises `Stopped` inside that thread (CPython's
PyThreadState_SetAsyncExc): pure-Python work stops at its next bytecode, a blocking wait
or a C routine (a DuckDB query, numpy) when it returns. The reply to a stopped call goes
out at once; its slot is freed only when its thread has really ended, so the bound on
running calls holds even while a stopped one finishes its C routine.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Stopped(BaseException):
    """Raised inside a call's thread to stop it: a BaseException, so an analysis's own
    `except Exception` cannot swallow it."""


class Call(Generic[T]):
    """`work` running in its own thread; `done` is set when the thread has ended, with
    `result` (None when it was stopped or failed: `error` holds what it raised)."""

    def __init__(self, work: Callable[[], T], name: str = "memlens-call") -> None:
        self._work = work
        self._guard = threading.Lock()
        self._running = False  # True while `work` runs: the only time a stop may be raised
        self.stopped = False
        self.result: T | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        with self._guard:
            self._running = not self.stopped
        if not self._running:
            self.done.set()
            return
        try:
            self.thread.start()
        except BaseException:  # no thread (the system's limit): nothing runs, nothing waits
            self._running = False
            self.done.set()
            raise

    def _run(self) -> None:
        try:
            try:
                self.result = self._work()
            finally:
                with self._guard:
                    self._running = False
        except BaseException as exc:  # noqa: BLE001 - the thread's end: kept for the caller
            self.error = exc
        finally:
            self.done.set()

    def stop(self) -> bool:
        """Stop the work (once); answers whether it was still running."""
        with self._guard:
            if self.stopped:
                return False
            self.stopped = True
            if not self._running or self.thread.ident is None:
                return False
            self._running = False  # raised once: a second stop must not hit the finally
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self.thread.ident), ctypes.py_object(Stopped)
            )
            return True

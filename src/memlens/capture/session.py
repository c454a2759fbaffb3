"""Who is recording, so that a finished recording can put back the one around it.

torch can tell whether CUDA memory history is on (`torch._C._cuda_isHistoryEnabled`) but not
with which settings. So memlens keeps a stack of the recordings it started itself: when one
ends, the enclosing memlens recording's settings are re-applied (history is kept, since
re-enabling does not clear it) or, if none is left, recording is switched off. Recording
that was switched on by other code cannot be put back faithfully, so memlens refuses to
start over it (RecordingActiveError) rather than silently wipe its history on exit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from memlens.capture.backend import Backend, RecordSettings, require_available
from memlens.capture.errors import RecordingActiveError

ACTIVE_ELSEWHERE_MESSAGE = (
    "CUDA memory history is already being recorded by code outside memlens "
    "(torch.cuda.memory._record_memory_history was called); memlens would lose that "
    "recording's history when it stops. Stop it first with "
    "torch.cuda.memory._record_memory_history(enabled=None), or dump it yourself"
)


SWITCHED_OFF_MESSAGE = (
    "CUDA memory history was switched off during the recording by code outside memlens "
    "(torch.cuda.memory._record_memory_history(enabled=None)), which also clears it: "
    "this snapshot has the allocator's segments but no trace"
)


@dataclass(eq=False)
class Token:
    """One memlens recording in progress."""

    backend: Backend
    settings: RecordSettings
    ended: bool = field(default=False)


_lock = threading.RLock()
_stack: list[Token] = []


def begin(settings: RecordSettings, backend: Backend) -> Token:
    """Start recording with `settings`; raise the clear errors before changing anything."""
    require_available(backend)
    with _lock:
        ours = [t for t in _stack if t.backend is backend]
        if not ours and backend.history_enabled():
            raise RecordingActiveError(ACTIVE_ELSEWHERE_MESSAGE)
        backend.start(settings)
        token = Token(backend, settings)
        _stack.append(token)
        return token


def end(token: Token) -> None:
    """Stop `token`'s recording and restore the state from before it began."""
    with _lock:
        if token.ended:
            return
        token.ended = True
        _stack.remove(token)
        enclosing = [t for t in _stack if t.backend is token.backend]
        if enclosing:
            token.backend.start(enclosing[-1].settings)
        else:
            token.backend.stop()


def switched_off(token: Token) -> bool:
    """Whether history, on since `token` began, is off now: other code switched it off
    (and so cleared it) and the dump about to be taken has no trace. Asked only to warn, so
    it never raises; a backend that cannot tell (None) is taken as still recording."""
    try:
        return token.backend.history_enabled() is False
    except Exception:
        return False


def active_settings(backend: Backend) -> RecordSettings | None:
    """The settings memlens last applied on `backend`, if a memlens recording is running."""
    with _lock:
        ours = [t for t in _stack if t.backend is backend]
        return ours[-1].settings if ours else None


def _reset_for_tests() -> None:
    with _lock:
        _stack.clear()

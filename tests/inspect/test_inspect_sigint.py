"""The inspector ignores SIGINT only while it starts its background process, and gives
Ctrl-C back afterwards, also when the handler before it was set outside Python."""

from __future__ import annotations

import signal

from memlens.inspector.transport import _sigint_ignored


def test_a_python_handler_is_put_back():
    def mine(signum, frame):  # pragma: no cover - never called
        pass

    previous = signal.signal(signal.SIGINT, mine)
    try:
        with _sigint_ignored():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_handler_set_outside_python_becomes_keyboard_interrupt(monkeypatch):
    # signal.signal answers None for a handler a C library installed: it cannot be put
    # back, and leaving SIGINT ignored would make Ctrl-C do nothing for the rest of the run
    real = signal.signal
    calls: list[object] = []

    def from_c(signum, handler):
        calls.append(handler)
        real(signum, handler)
        return None if len(calls) == 1 else signal.SIG_IGN

    monkeypatch.setattr(signal, "signal", from_c)
    previous = signal.getsignal(signal.SIGINT)
    try:
        with _sigint_ignored():
            pass
        assert calls == [signal.SIG_IGN, signal.default_int_handler]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        real(signal.SIGINT, previous)


def test_off_the_main_thread_nothing_changes():
    import threading

    seen: list[object] = []

    def run() -> None:
        with _sigint_ignored():
            seen.append(signal.getsignal(signal.SIGINT))

    before = signal.getsignal(signal.SIGINT)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [before] and signal.getsignal(signal.SIGINT) is before

"""Issue 27 items 3, 4 and 6: the 'memory' bound holds in any thread and for both readers,
and EXT opcodes are refused before anything runs. Loads run in a bounded child, in a
thread (bounded_child.py)."""

from __future__ import annotations

import copyreg
import pickle
import threading
from pathlib import Path

import pytest
from bounded_child import load_in_thread

import memlens
from memlens.errors import UnsafePickleError
from memlens.snapshot.native import built
from memlens.snapshot.read import prescan

READERS = ["python", "auto"] if built() is not None else ["python"]


@pytest.mark.parametrize("reader", READERS)
def test_memo_index_bomb_is_refused_in_a_thread(tmp_path: Path, reader: str) -> None:
    p = tmp_path / "memo.pickle"
    p.write_bytes(b"\x80\x02}r\x00\x00\x00\x10.")  # LONG_BINPUT 2^28: a 4 GB memo table
    got = load_in_thread(p, reader)
    assert got["result"] == "limit memo", got
    assert "a memo index of 268,435,456 at byte 3" in got["message"]


@pytest.mark.parametrize("reader", READERS)
def test_a_memo_index_is_the_memo_limit_in_both_readers(tmp_path: Path, reader: str) -> None:
    # index 2,000,000 (32 MB of memo table) in a 10-byte file: within the 'memory' limit,
    # past the 'memo' one; only the compiled reader refused it before, the other read it
    p = tmp_path / "memo2.pickle"
    p.write_bytes(b"\x80\x02}r\x80\x84\x1e\x00.")
    got = load_in_thread(p, reader)
    assert got["result"] == "limit memo", got
    assert "more than 1,000,000 pickle memo slots" in got["message"]


def _empty_dicts_snapshot(n: int) -> bytes:
    """A valid snapshot plus `n` empty dicts under a key memlens keeps going past: 1 byte of
    pickle each, about 80 bytes each once unpickled."""
    # protocol 2: no FRAME, so the body may grow (an opcode never crosses a frame's end)
    head = pickle.dumps({"segments": [], "device_traces": []}, protocol=2)[:-2]  # no "u."
    assert head.endswith(b"]q\x04")
    body = b"\x8c\x01x(" + b"}" * n + b"l"  # key "x", MARK, n dicts, LIST
    return head + body + b"u."


def test_the_empty_dicts_file_is_well_formed() -> None:
    snap = pickle.loads(_empty_dicts_snapshot(3))
    assert snap == {"segments": [], "device_traces": [], "x": [{}, {}, {}]}


@pytest.mark.parametrize("reader", READERS)
def test_a_file_of_empty_dicts_is_refused_alike_by_both_readers(
    tmp_path: Path, reader: str
) -> None:
    # 14 MB: 14 million dicts, 1.1 GB for the unpickler; the limit for 14 MB is 1 GiB
    p = tmp_path / "dicts.pickle"
    p.write_bytes(_empty_dicts_snapshot(14_000_000))
    got = load_in_thread(p, reader)
    assert got["result"] == "limit memory", got
    # the same estimate and so the same words from either reader
    assert "1,073,741,824 bytes of memory while unpickling" in got["message"]


def test_the_estimate_bounds_what_the_unpickler_takes_for_empty_dicts() -> None:
    # an empty dict is 64 bytes; it is charged the key table its first item would bring
    # (160), as nothing tells the scan which item is a dict's first
    import tracemalloc

    n = 200_000
    data = _empty_dicts_snapshot(n)
    tracemalloc.start()
    obj = pickle.loads(data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del obj
    est = prescan.check(data, what="x", memory_limit=0, memo_limit=0)
    assert peak <= est <= 4 * peak


def _ext_reduce_pickle(code: int) -> bytes:
    return b"\x80\x02\x82" + bytes([code]) + b")R."  # EXT1 code, (), REDUCE


RAN: list[str] = []


def _payload() -> str:
    RAN.append("ran")
    return "pwned"


def test_ext_opcodes_are_refused_even_when_copyreg_serves_them(tmp_path: Path, monkeypatch) -> None:
    code = 0xF1
    copyreg.add_extension(__name__, "_payload", code)
    try:
        pickle.loads(_ext_reduce_pickle(code))  # primes copyreg's cache, as any earlier load
        assert RAN == ["ran"]
        RAN.clear()
        p = tmp_path / "ext.pickle"
        p.write_bytes(_ext_reduce_pickle(code)[:-1] + b"}.")  # ... then a dict on top
        for reader in READERS:
            monkeypatch.setenv("MEMLENS_READER", reader)
            with pytest.raises(UnsafePickleError, match="EXT1"):
                memlens.load(p, cache=False)
        for opcode in (b"\x82\xf1", b"\x83\xf1\x00", b"\x84\xf1\x00\x00\x00"):
            with pytest.raises(UnsafePickleError, match="EXT"):
                memlens.load(b"\x80\x02" + opcode + b")R.", cache=False)
        assert RAN == []
    finally:
        copyreg.remove_extension(__name__, "_payload", code)
        copyreg._extension_cache.pop(code, None)  # type: ignore[attr-defined]


def test_the_memory_limit_is_one_line_even_when_cpython_reports_on_the_way(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Issue 27 item 7: at the address-space limit, a CPython "Exception ignored" or
    SystemError line came before the 'memory' error (12 of 32,000 fuzz cases)."""
    from memlens.cli.main import run
    from memlens.snapshot.read import safe_pickle

    class Dies:
        def __del__(self) -> None:
            raise MemoryError  # what a finalizer meets at the limit: reported, not raised

    def load(self: object) -> object:
        obj = Dies()
        del obj  # "Exception ignored in: <function Dies.__del__ ...>" on stderr
        raise SystemError("<built-in method load> returned NULL without setting an exception")

    monkeypatch.setattr(safe_pickle._PlainDataUnpickler, "load", load)
    monkeypatch.setattr(threading, "active_count", lambda: 1)
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    monkeypatch.setenv("MEMLENS_READER", "python")
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps({"segments": [], "device_traces": []}, protocol=4))
    assert run(["summary", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "the 'memory' limit" in err

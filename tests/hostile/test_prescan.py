"""The scan before unpickling (memlens.snapshot.read.prescan) in Python and in C
(`_fastreader.scan`) give the same answer to the byte: status, refused opcode, estimate and
position. The Python one serves builds without a compiler, the C one every other, so a
difference would make the bound depend on how memlens was installed."""

from __future__ import annotations

import pickle
import pickletools
import random
import sys
from pathlib import Path

import pytest

from memlens.snapshot.native import built
from memlens.snapshot.read import prescan
from shared_data import SHARED_SNAPSHOTS, real_snapshot_names

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "snapshot"))
from fuzz_mutations import mutate, opcode_table  # noqa: E402

FAST = built()
pytestmark = pytest.mark.skipif(FAST is None, reason="compiled reader not built")


def _both(
    data: bytes, memory: int = 0, memo: int = 0
) -> tuple[tuple[str, str, int, int], tuple[str, str, int, int]]:
    assert FAST is not None
    return prescan.scan(data, memory, memo), FAST.scan(data, memory, memo, prescan.COSTS)


def _base() -> bytes:
    from corpus import base_snapshot

    return pickle.dumps(base_snapshot(), protocol=4)


def test_exact_answers_on_small_cases() -> None:
    base = prescan.BASE
    # a list (56, and 48 for the slots it will grow), a memo slot, a stack slot
    assert _both(b"\x80\x02]\x94.") == (("ok", "", base + 104 + 16 + 16, 5),) * 2
    assert _both(b"\x80\x02)R.")[0] == ("refused", "REDUCE", base + 16, 3)
    assert _both(b"\x80\x02\x82\x01")[1] == ("refused", "EXT1", base, 2)
    assert _both(b"\x80\x02X\xff\xff\xff\x7f")[0] == ("truncated", "", base, 7)
    assert _both(b"\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.")[0][0] == "truncated"
    assert _both(b"\x80\x02}r\x00\x00\x00\x10.", memo=1000)[0] == ("memo", "", 2**28 + 1, 3)
    assert _both(b"(p 12\n.")[0][0] == "bad-put"  # int() would read " 12"; no one else
    memory = _both(b"\x80\x02(" + b"}" * 1000 + b"l.", memory=50_000)
    assert memory[0] == memory[1] and memory[0][0] == "memory"


@pytest.mark.parametrize("seed", range(4))
def test_c_and_python_agree_on_mutations(seed: int) -> None:
    data = _base()
    ops = opcode_table(data)
    for case in range(seed * 1000, seed * 1000 + 1000):
        _kind, mutated = mutate(data, ops, case)
        for memory in (0, 20_000):
            py, c = _both(mutated, memory, 500)
            assert py == c, (case, py, c)


def test_c_and_python_agree_on_random_bytes() -> None:
    rng = random.Random(27)
    alphabet = b"()}]lteasu.NKJMhjqr\x94\x95\x8cXpg0123456789\n\x85\x86\x87\x88\x89\x8a"
    for _ in range(3000):
        data = b"\x80\x04" + bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 60)))
        for memory in (0, 500):
            py, c = _both(data, memory, 50)
            assert py == c, (data, py, c)


@pytest.mark.parametrize("name", real_snapshot_names())
def test_c_and_python_agree_on_real_snapshots(name: str) -> None:
    data = (SHARED_SNAPSHOTS / name).read_bytes()
    py, c = _both(data)
    assert py == c and py[0] == "ok"
    # the estimate bounds the unpickler's own allocations (tracemalloc); an upper bound for
    # every shape is 2.1-3.1x on real ones (a small dict is charged for the largest transient
    # key table a dict of its items can need)
    import tracemalloc

    tracemalloc.start()
    obj = pickle.loads(data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del obj
    assert peak <= py[2] <= 3.5 * peak


def test_no_opcode_or_line_crosses_a_frame() -> None:
    # FRAME of 3 bytes, then a 4-byte BININT: CPython's file unpickler reads the frame
    # whole and says "truncated"; buffer mode would read on. One rule for both: refused.
    crossing = b"\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00J\x01\x00\x00\x00."
    assert _both(crossing)[0][0] == "frame" and _both(crossing)[1][0] == "frame"
    fits = b"\x80\x04\x95\x06\x00\x00\x00\x00\x00\x00\x00J\x01\x00\x00\x00."
    assert _both(fits)[0][0] == "ok" and pickle.loads(fits) == 1
    # GLOBAL's module line ending after the frame's end
    line = b"\x80\x04\x95\x03\x00\x00\x00\x00\x00\x00\x00cos\nsystem\n."
    assert _both(line)[0] == _both(line)[1] and _both(line)[0][0] == "frame"


def _framed(body: bytes, cut: int) -> bytes:
    def frame(part: bytes) -> bytes:
        return b"\x95" + len(part).to_bytes(8, "little") + part

    return b"\x80\x04" + frame(body[:cut]) + frame(body[cut:])


def test_c_and_python_agree_wherever_a_frame_ends() -> None:
    # the C scan reads the common opcodes without checks while 5 bytes remain before the
    # frame's end, and the general step near it: a frame ending at every byte of a
    # snapshot, and the file cut there too, must give one answer
    from corpus import base_snapshot

    body = pickle.dumps(base_snapshot(), protocol=2)[2:]
    plain = _both(b"\x80\x02" + body)[0]
    boundaries = {pos for _op, _arg, pos in pickletools.genops(body)}
    for cut in range(1, len(body)):
        data = _framed(body, cut)
        py, c = _both(data, 0, 0)
        assert py == c, (cut, py, c)
        if cut in boundaries:  # a frame may end between any two opcodes
            # the same, and the frames' bytes, which a stream's reader copies
            framed = (*plain[:2], plain[2] + prescan.PER_READ_BYTE * len(body))
            assert py[:3] == framed, (cut, py, plain)
        else:  # an opcode across it: refused (or a length past the data, first)
            assert py[0] in ("frame", "truncated"), (cut, py)
        cut_file = data[: 2 + 9 + cut + 3]
        assert _both(cut_file, 0, 0)[0] == _both(cut_file, 0, 0)[1], cut

"""Issue 27 item 5: both readers give one answer for every file (docs/security.md, "One
answer from both readers"): the same snapshot to the byte, or the same one-line error.

A structure-aware differential fuzz: mutations of small generated snapshots at the level
of opcodes (truncations inside each kind, opcode swaps, declared lengths, memo indices,
values of another type, splices: tests/snapshot/fuzz_mutations.py), FRAME lengths, a
frames list appended to after its entry was read, and gzip framing (a cut trailer, bytes
after the stream, a second member). Each case is loaded by the compiled reader (falling
back to the Python path where it declines, as `memlens` does) and by the Python path,
in-process; the outcomes must be equal. 2,000 cases by default (well under a minute);
MEMLENS_DIFF_FUZZ=100000 for the long run.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import pickle
import pickletools
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from corpus import base_snapshot

import memlens
from memlens.errors import MemlensError
from memlens.simulation.synthetic import generate_trace_dict
from memlens.snapshot.model import Snapshot
from memlens.snapshot.read import compiled

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "snapshot"))
from fuzz_mutations import mutate, opcode_table  # noqa: E402

pytestmark = pytest.mark.skipif(not compiled.available(), reason="compiled reader not built")
CASES = int(os.environ.get("MEMLENS_DIFF_FUZZ", "2000"))


@contextmanager
def _reader(mode: str) -> Iterator[None]:
    old = os.environ.get(compiled.READER_ENV)
    os.environ[compiled.READER_ENV] = mode
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(compiled.READER_ENV, None)
        else:
            os.environ[compiled.READER_ENV] = old


def digest(snap: Snapshot) -> str:
    """Every table and figure of a snapshot, and its warnings, as one hash."""
    h = hashlib.sha256()

    def put(v: Any) -> None:
        if isinstance(v, np.ndarray):
            h.update(str(v.dtype).encode() + str(v.shape).encode() + v.tobytes())
        elif dataclasses.is_dataclass(v) and not isinstance(v, type):
            for f in dataclasses.fields(v):
                if f.name != "snapshot":
                    h.update(f.name.encode())
                    put(getattr(v, f.name))
        else:
            h.update(repr(v).encode("utf-8", "surrogatepass"))

    for name in ("strings", "frames", "stacks", "streams", "segments", "annotations",
                 "action_names", "format_notes", "warnings"):  # fmt: skip
        put(getattr(snap, name))
    h.update(json.dumps(snap.allocator_settings, sort_keys=True).encode("utf-8", "surrogatepass"))
    for d in sorted(snap.traces):
        put(snap.traces[d])
    return h.hexdigest()


def outcome(path: Path, mode: str) -> tuple[str, str]:
    with _reader(mode):
        try:
            return "ok", digest(memlens.load(path, cache=False, warn=False))
        except MemlensError as exc:
            return type(exc).__name__, str(exc)


# ---------------------------------------------------------------- the bases


def _ub(s: str) -> bytes:
    raw = s.encode()
    return b"X" + len(raw).to_bytes(4, "little") + raw


LATE_FRAME = (
    b"}(" + _ub("filename") + _ub("/home/u/late.py") + _ub("line") + b"K\x03"
    + _ub("name") + _ub("late") + b"u"
)  # fmt: skip


def appended_after_read(data: bytes) -> bytes:
    """`data` with the first entry's frames list appended to at the very end (a new
    top-level key "z" holds the list, with one more frame): legal pickle, whose entries all
    see the list as it is at the end."""
    memo = 0
    frames_seen = False
    target = None
    ops = list(pickletools.genops(data))
    for i, (op, arg, _pos) in enumerate(ops):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE") and arg == "frames":
            frames_seen = True
        if op.name == "EMPTY_LIST" and frames_seen and target is None:
            nxt = ops[i + 1]
            target = memo if nxt[0].name == "MEMOIZE" else nxt[1]
        if op.name == "MEMOIZE":
            memo += 1
        elif op.name in ("BINPUT", "LONG_BINPUT"):
            assert isinstance(arg, int)
            memo = max(memo, arg + 1)
    assert target is not None and data.endswith(b"u.")
    get = b"j" + target.to_bytes(4, "little")
    return data[:-2] + _ub("z") + get + LATE_FRAME + b"au."


def _bases() -> list[tuple[str, bytes]]:
    snap = base_snapshot()
    gen = generate_trace_dict(events=60, layers=2, hidden=16, seed=3)
    out = [
        ("base-p2", pickle.dumps(snap, protocol=2)),
        ("base-p4", pickle.dumps(snap, protocol=4)),
        ("gen-p4", pickle.dumps(gen, protocol=4)),
        ("gen-p5", pickle.dumps(gen, protocol=5)),
    ]
    out.append(("appended", appended_after_read(out[0][1])))
    return out


BASES = _bases()
OPS = {name: opcode_table(data) for name, data in BASES}


def _frame_lengths(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for i in [i for i, (_s, _e, name) in enumerate(OPS_OF[id(data)]) if name == "FRAME"]:
        start = OPS_OF[id(data)][i][0]
        value = rng.choice([0, 1, len(b), len(b) - start - 9, rng.getrandbits(16), 1 << 62])
        b[start + 1 : start + 9] = max(value, 0).to_bytes(8, "little")
    return bytes(b)


OPS_OF: dict[int, list[tuple[int, int, str]]] = {id(d): OPS[n] for n, d in BASES}


def _gzip_framing(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    z = gzip.compress(data, compresslevel=1, mtime=0)
    how = rng.choice(["trailer", "garbage", "zeros", "members", "crc", "body"])
    if how == "trailer":
        return how, z[: len(z) - rng.randint(1, 8)]
    if how == "garbage":
        return how, z + rng.randbytes(rng.randint(1, 16))
    if how == "zeros":
        return how, z + bytes(rng.randint(1, 16))
    if how == "members":
        cut = rng.randrange(1, len(data))
        return how, gzip.compress(data[:cut], mtime=0) + gzip.compress(data[cut:], mtime=0)
    if how == "crc":
        b = bytearray(z)
        b[-8 + rng.randrange(8)] ^= 1 << rng.randrange(8)
        return how, bytes(b)
    b = bytearray(z)
    b[rng.randrange(10, len(b) - 8)] ^= 1 << rng.randrange(8)
    return how, bytes(b)


def make(case: int) -> tuple[str, bytes]:
    name, data = BASES[case % len(BASES)]
    rng = random.Random(case)
    roll = rng.random()
    if roll < 0.1:
        return f"{name} frames", _frame_lengths(data, rng)
    if roll < 0.25:
        how, z = _gzip_framing(data, rng)
        return f"{name} gzip {how}", z
    kind, mutated = mutate(data, OPS[name], case)
    if roll < 0.35:
        return f"{name} gzip+{kind}", gzip.compress(mutated, compresslevel=1, mtime=0)
    return f"{name} {kind}", mutated


# ---------------------------------------------------------------- the tests


def test_a_frames_list_appended_to_after_its_entry_reads_alike(tmp_path: Path) -> None:
    p = tmp_path / "appended.pickle"
    p.write_bytes(dict(BASES)["appended"])
    assert pickle.loads(p.read_bytes())["z"][-1]["name"] == "late"
    fast, slow = outcome(p, "auto"), outcome(p, "python")
    assert fast == slow and fast[0] == "ok"
    # the list as it is at the end: the allocation's stack holds the late frame
    with _reader("auto"):
        snap = memlens.load(p, cache=False, warn=False)
    dev = snap.traces[0]
    stack = int(dev.alloc_stack[0])
    names = [snap.strings[snap.frames.name[f]] for f in snap.stacks.frames_of(stack)]
    assert names[-1] == "late"


@pytest.mark.parametrize("how", ["trailer", "garbage", "zeros", "members", "crc", "body"])
def test_gzip_framing_reads_alike(tmp_path: Path, how: str) -> None:
    data = dict(BASES)["base-p4"]
    for seed in range(20):
        rng = random.Random(seed)
        while True:
            got, z = _gzip_framing(data, rng)
            if got == how:
                break
        p = tmp_path / f"{how}.pickle.gz"
        p.write_bytes(z)
        fast, slow = outcome(p, "auto"), outcome(p, "python")
        assert fast == slow, (how, seed, fast, slow)
        if how in ("zeros", "members"):
            assert fast[0] == "ok"
        else:
            assert fast[0] == "SnapshotError" and "gzip data is corrupt or truncated" in fast[1]


def test_differential_fuzz(tmp_path: Path) -> None:
    disagreements: list[str] = []
    kinds: dict[str, int] = {}
    p = tmp_path / "case.pickle"
    for case in range(CASES):
        what, data = make(case)
        p.write_bytes(data)
        fast, slow = outcome(p, "auto"), outcome(p, "python")
        kinds[fast[0]] = kinds.get(fast[0], 0) + 1
        if fast != slow:
            disagreements.append(f"case {case} ({what}): {fast} != {slow}")
    print(f"{CASES} cases, outcomes {kinds}, {len(disagreements)} disagreements")
    assert not disagreements, "\n".join(disagreements[:20])

"""Mutations of snapshot pickles for the compiled reader's fuzz test, and its worker.

A case is (base file, case number): the mutation is drawn from random.Random(case number),
so any case can be replayed alone. Kinds: truncation at an opcode boundary or inside an
argument (one of each opcode kind, in turn), bit flips, an opcode byte replaced by another
(refused ones included), a declared length made huge, a memo index made huge, a value
replaced by one of another type, a range deleted, duplicated or filled with random bytes,
and damage to gzip-compressed bytes.

Worker: `python fuzz_mutations.py BASES_JSON FIRST COUNT` loads each mutated file with
memlens.load (cache off) and prints one JSON line per case: the outcome (0 loaded, 2 a
one-line MemlensError, anything else a failure), which reader read the file (the compiled
one, or the Python path it left the file to) and how far the peak RSS rose above the RSS
before the case.
"""

from __future__ import annotations

import gzip
import json
import os
import pickletools
import random
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlens.snapshot.limits import Limits

ALL_OPCODES = sorted({op.code.encode("latin-1")[0] for op in pickletools.opcodes})
LENGTH_WIDTH = {  # opcode -> width of its little-endian length field
    "SHORT_BINUNICODE": 1, "BINUNICODE": 4, "BINUNICODE8": 8, "LONG1": 1, "LONG4": 4,
    "FRAME": 8, "SHORT_BINBYTES": 1, "BINBYTES": 4, "BINBYTES8": 8, "BYTEARRAY8": 8,
    "SHORT_BINSTRING": 1, "BINSTRING": 4,
}  # fmt: skip
MEMO_WIDTH = {"BINGET": 1, "BINPUT": 1, "LONG_BINGET": 4, "LONG_BINPUT": 4}
OTHER_VALUES = [
    b"N", b"\x88", b"\x89", b"K\x05", b"J\xff\xff\xff\xff", b"\x8c\x01x", b"G" + bytes(8),
    b"]", b"}", b")", b"\x8a\x09" + b"\xff" * 8 + b"\x00", b"\x8a\x10" + b"\x01" * 16,
    b"\x8c\x06action", b"\x8c\x06frames", b"\x8c\x0ddevice_traces", b"N\x94",
]  # fmt: skip
KINDS = ["truncate", "flip", "opcode", "length", "memo", "value", "splice"]


def opcode_table(data: bytes) -> list[tuple[int, int, str]]:
    """(start, end, name) of every opcode up to STOP (the part that is still a pickle)."""
    out: list[tuple[int, int, str]] = []
    prev = None
    try:
        for op, _arg, pos in pickletools.genops(data):
            assert pos is not None  # None only for a stream without tell()
            if prev is not None:
                out.append((prev[0], pos, prev[1]))
            prev = (pos, op.name)
    except Exception:
        pass
    if prev is not None:
        out.append((prev[0], prev[0] + 1, prev[1]))
    return out


def mutate(data: bytes, ops: list[tuple[int, int, str]], case: int) -> tuple[str, bytes]:
    rng = random.Random(case)
    kind = KINDS[case % len(KINDS)]
    b = bytearray(data)
    if kind == "truncate":
        names = sorted({name for _, _, name in ops})
        name = names[(case // len(KINDS)) % len(names)]
        start, end, _ = rng.choice([o for o in ops if o[2] == name])
        cut = start + 1 if rng.random() < 0.5 else rng.randint(start, end)
        return f"truncate {name}@{cut}", bytes(b[:cut])
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return "flip", bytes(b)
    if kind == "opcode":
        start, _, name = rng.choice(ops)
        b[start] = rng.choice(ALL_OPCODES)
        return f"opcode {name}@{start}->{b[start]:#x}", bytes(b)
    if kind == "length":
        cands = [o for o in ops if o[2] in LENGTH_WIDTH]
        if cands:
            start, _, name = rng.choice(cands)
            w = LENGTH_WIDTH[name]
            value = rng.choice([(1 << (8 * w)) - 1, (1 << (8 * w - 1)) - 1, rng.getrandbits(8 * w)])
            b[start + 1 : start + 1 + w] = value.to_bytes(w, "little")
            return f"length {name}@{start}={value}", bytes(b)
    if kind == "memo":
        cands = [o for o in ops if o[2] in MEMO_WIDTH]
        if cands:
            start, _, name = rng.choice(cands)
            w = MEMO_WIDTH[name]
            value = rng.choice([(1 << (8 * w)) - 1, rng.getrandbits(8 * w), 0])
            b[start + 1 : start + 1 + w] = value.to_bytes(w, "little")
            return f"memo {name}@{start}={value}", bytes(b)
    if kind == "value":
        values = [
            o
            for o in ops
            if o[2].startswith(("BININT", "LONG1", "SHORT_BINUNICODE", "NEW", "NONE", "EMPTY"))
        ]
        if values:
            start, end, name = rng.choice(values)
            b[start:end] = rng.choice(OTHER_VALUES)
            return f"value {name}@{start}", bytes(b)
    # splice (also the fallback of the kinds above when a file has no such opcode)
    i = rng.randrange(len(b))
    j = min(len(b), i + rng.randint(1, 64))
    how = rng.choice(["delete", "duplicate", "random"])
    if how == "delete":
        del b[i:j]
    elif how == "duplicate":
        b[i:i] = b[i:j]
    else:
        b[i:j] = rng.randbytes(j - i)
    return f"splice {how}@{i}", bytes(b)


def make_case(base: Path, case: int) -> tuple[str, bytes]:
    raw = base.read_bytes()
    if raw[:2] == b"\x1f\x8b":  # gzip: damage the compressed bytes, or the inner pickle
        rng = random.Random(case)
        if rng.random() < 0.5:
            b = bytearray(raw)
            if rng.random() < 0.5:
                return "gzip truncate", bytes(b[: rng.randrange(10, len(b))])
            i = rng.randrange(10, len(b))
            b[i] ^= 1 << rng.randrange(8)
            return "gzip flip", bytes(b)
        inner = gzip.decompress(raw)
        how, data = mutate(inner, _ops(base, inner), case)
        return f"gzip+{how}", gzip.compress(data, compresslevel=1)
    return mutate(raw, _ops(base, raw), case)


_OPS: dict[Path, list[tuple[int, int, str]]] = {}


def _ops(base: Path, data: bytes) -> list[tuple[int, int, str]]:
    if base not in _OPS:
        _OPS[base] = opcode_table(data)
    return _OPS[base]


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Reset the peak RSS (VmHWM) so the next case is measured alone (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _spy_reader(state: dict[str, str]) -> None:
    """Record whether the compiled reader read each file or left it to the Python path."""
    from memlens.snapshot.read import compiled

    real = compiled.read_compiled

    def spy(path: Path, name: str) -> tuple[Any, Limits] | None:
        state["reader"] = "compiled"
        got = real(path, name)
        if got is None:
            state["reader"] = "python"
        return got

    compiled.read_compiled = spy


def main() -> None:
    bases = [Path(p) for p in json.loads(Path(sys.argv[1]).read_text())]
    first, count = int(sys.argv[2]), int(sys.argv[3])
    import memlens
    from memlens.errors import MemlensError
    from memlens.views.escape import visible

    for base in bases:  # warm up: imports, numpy, one plain load of each base
        memlens.load(base, cache=False, warn=False)
    state: dict[str, str] = {}
    _spy_reader(state)
    tmp = Path(tempfile.mkdtemp(prefix="memlens-fuzz-"))
    for case in range(first, first + count):
        base = bases[case % len(bases)]
        how, data = make_case(base, case)
        path = tmp / f"case{case}.pickle"
        path.write_bytes(data)
        state["reader"] = "python"
        resettable = _reset_peak()
        before = _status_kb("VmRSS")
        try:
            memlens.load(path, cache=False, warn=False)
            outcome = "0"
        except MemlensError as exc:  # the CLI prints visible(message): one line, exit 2
            outcome = "2" if "\n" not in visible(str(exc)) else "multi-line error"
        except Exception as exc:  # would be a traceback (exit 1) from the CLI
            outcome = f"{type(exc).__name__}: {str(exc)[:200]}"
        growth = (_status_kb("VmHWM") - before) * 1024 if resettable else -1
        path.unlink()
        line = {"case": case, "base": base.name, "how": how, "size": len(data)}
        line.update(outcome=outcome, reader=state["reader"], growth=growth)
        print(json.dumps(line), flush=True)
    os.rmdir(tmp)


if __name__ == "__main__":
    main()

"""A pass over a pickle's opcodes before anything is built: the memory bound that holds in
any thread, and the refusals that must come before the unpickler runs.

The C unpickler cannot be interrupted, and it builds what the file describes: a 7-byte file
can ask it for a 4 GB memo table (LONG_BINPUT 2^28), a 24 MB file for 24 million dicts
(2 GB). `RLIMIT_AS` bounded that only in a single-threaded CLI; a Dask worker, a notebook
kernel or `memlens.load` in a thread has other threads running. So the opcodes are read
first (no object made), and what the unpickler would allocate is estimated from them with
the costs below, which are upper bounds of CPython's own (64-bit: an empty dict is 64 bytes
plus 16 of GC header, a list item 8 bytes plus over-allocation, a str 49 bytes plus its
characters...). Past the 'memory' limit the file is refused before the unpickler starts.
The compiled reader charges the same costs for the same opcodes (`csrc/reader_scan.c`),
so both readers refuse the same files at the same limit.

It also refuses, in file order, every opcode that can reach code without `find_class`
(REDUCE, BUILD, NEWOBJ, OBJ, persistent ids, and EXT1/2/4: an extension code registered
with copyreg and once loaded is served from copyreg's cache, never passing find_class).
GLOBAL, INST and STACK_GLOBAL end the scan: the unpickler refuses them through
find_class, naming what they import. A length past the end of the data is a truncation.
"""

from __future__ import annotations

import struct
from typing import Any

from memlens.errors import SnapshotError, UnsafePickleError
from memlens.snapshot.limits import LimitExceeded
from memlens.snapshot.native import built

# Bytes each value costs the unpickler (CPython 3.11, 64-bit, GC headers included), as
# tracemalloc counts them at the unpickler's peak; a container also pays per item as items
# are added to it. Each is an upper bound for every size (tests/hostile/test_memory_estimate.py
# measures generated shapes against it):
# - a dict is 64 bytes, and its first item brings a key table of 160 (8 slots, 5 usable,
#   24-byte entries); charged when it is made, as nothing tells the scan which item is the
#   first. Past 5 items a table grows to the next power of two above 3 x its items, and
#   while it is rebuilt the old one is still there: 90 bytes an item at the peak while
#   indices fit 4 bytes, 108 past 2^31 slots.
# - a list is 56, its first append makes 4 slots (32), then it keeps 1/8 spare + 6 slots;
#   APPENDS also makes a temporary list of the items (8 each).
# - a set is 216 with 8 slots inline, then grows to 4 x its items (16 bytes a slot), the old
#   table still there while it is rebuilt, the items first gathered in a tuple: 145 an item.
# - an int is 28 + 4 bytes a 30-bit digit: 32 for 4 bytes, 2 per byte of LONG1/LONG4.
# - a str is 49 + its characters when ASCII. Otherwise CPython's decoder starts with an ASCII
#   buffer of one character per byte and widens it to 1, 2 then 4 bytes a character (72
#   bytes of header each), each widening holding the old buffer and the new one: 150 + 6
#   per byte at the peak.
# - bytes are 33 + their length, a bytearray 57 + its length.
# - read from a stream (the Python path reads io.BytesIO), each counted argument and each
#   FRAME is first copied into a bytes object: 1 more per byte.
# - the memo table doubles past the largest index (8 bytes x 2); the stack keeps 1/8 spare
#   + 6 slots, the MARK stack doubles (8 bytes x 2).
# - a text line (protocol 0) is copied, and decoded as a str is (150 + 6 per byte).
# - the unpickler itself: its object, a 32-slot memo, an 8-slot stack, 20 marks (677 bytes
#   for `None`).
DICT, LIST, TUPLE, SET = 224, 104, 48, 216
PER_DICT_ITEM, PER_LIST_ITEM, PER_TUPLE_ITEM, PER_SET_ITEM = 108, 9, 8, 152
INT, FLOAT, STR, BYTES = 32, 24, 56, 64
PER_MEMO_SLOT = 16
STACK_SLOT = 16  # a slot of the stack at its deepest, and each MARK
WIDE_STR = 96  # a str that is not ASCII, on top of STR
PER_WIDE_BYTE = 6  # each byte of such a str
PER_LONG_BYTE = 2  # each byte of LONG1/LONG4
PER_LINE_BYTE = 8  # each byte of a text line (its copy and its decoding), on top of WIDE_STR
PER_READ_BYTE = 1  # the copy of each counted argument's and each FRAME's bytes
BASE = 4096  # the Python path before any opcode: the unpickler, its 32-slot memo, 8-slot stack
# and 20 marks, its Python subclass, the stream (1,900 bytes for `None`)
# in the order _fastreader.scan takes them (csrc/reader.h: C_DICT ...)
COSTS = (
    DICT, LIST, TUPLE, SET, PER_DICT_ITEM, PER_LIST_ITEM, PER_TUPLE_ITEM, PER_SET_ITEM,
    INT, FLOAT, STR, BYTES, PER_MEMO_SLOT, STACK_SLOT, WIDE_STR, PER_WIDE_BYTE,
    PER_LONG_BYTE, PER_LINE_BYTE, PER_READ_BYTE, BASE,
)  # fmt: skip

# fixed-size arguments; counted ones: the bytes of their length
_FIXED = {
    0x80: 1, ord("J"): 4, ord("K"): 1, ord("M"): 2, ord("G"): 8, ord("h"): 1, ord("j"): 4,
    ord("q"): 1, ord("r"): 4, 0x82: 1, 0x83: 2, 0x84: 4, 0x95: 8,
}  # fmt: skip
_COUNTED = {
    0x8C: 1, ord("X"): 4, 0x8D: 8, ord("C"): 1, ord("B"): 4, 0x8E: 8, 0x96: 8, ord("U"): 1,
    ord("T"): 4, 0x8A: 1, 0x8B: 4,
}  # fmt: skip
_TEXT = frozenset((0x8C, ord("X"), 0x8D))
_LONGS = frozenset((0x8A, 0x8B))
_LINE = frozenset(b"ILFSVgp")  # one newline-terminated argument
_END_SCAN = frozenset(b"ci\x93")  # refused by find_class, with its wording
# every opcode the unpickler knows, but the out-of-band buffers it refuses: the scan ends
# where the unpickler must stop (an unknown byte, NEXT_BUFFER), and leaves it the words
_OPCODES = frozenset(b"().012BCFGIJKLMNPQRSTUVX]abcdeghijlopqrstu}") | frozenset(range(0x80, 0x97))
# refused here: each needs a callable, and EXT serves one from copyreg's cache
REFUSED = {
    ord("R"): "REDUCE", ord("b"): "BUILD", ord("o"): "OBJ", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX",
    0x82: "EXT1", 0x83: "EXT2", 0x84: "EXT4", ord("P"): "PERSID", ord("Q"): "BINPERSID",
}  # fmt: skip
# opcodes that push one value, and what the value costs (its argument's length aside)
_PUSH = {
    ord("}"): DICT, ord("]"): LIST, 0x8F: SET, ord("J"): INT, ord("I"): INT, ord("L"): INT,
    0x8A: INT, 0x8B: INT, ord("G"): FLOAT, ord("F"): FLOAT, 0x8C: STR, ord("X"): STR,
    0x8D: STR, ord("V"): STR, ord("U"): STR, ord("T"): STR, ord("S"): STR, ord("C"): BYTES,
    ord("B"): BYTES, 0x8E: BYTES, 0x96: BYTES, ord("N"): 0, 0x88: 0, 0x89: 0, ord(")"): 0,
    ord("h"): 0, ord("j"): 0, ord("g"): 0, ord("2"): 0, ord("K"): 0, ord("M"): 0,
}  # fmt: skip
# opcodes that take the items above the innermost MARK into a new or the top value:
# (cost of a new value or 0, cost per item, whether a value is left on the stack)
_FROM_MARK = {
    ord("l"): (LIST, PER_LIST_ITEM, 1), ord("t"): (TUPLE, PER_TUPLE_ITEM, 1),
    ord("d"): (DICT, PER_DICT_ITEM // 2, 1), 0x91: (SET, PER_SET_ITEM, 1),
    ord("e"): (LIST, PER_LIST_ITEM + PER_TUPLE_ITEM, 0), ord("u"): (0, PER_DICT_ITEM // 2, 0),
    0x90: (0, PER_SET_ITEM, 0), ord("1"): (0, 0, 0),
}  # fmt: skip
# opcodes that pop `k` values and push `left` back: (k, cost of what they make, left)
_POP = {
    ord("a"): (2, PER_LIST_ITEM, 1), ord("s"): (3, PER_DICT_ITEM, 1), ord("0"): (1, 0, 0),
    0x85: (1, TUPLE + PER_TUPLE_ITEM, 1), 0x86: (2, TUPLE + 2 * PER_TUPLE_ITEM, 1),
    0x87: (3, TUPLE + 3 * PER_TUPLE_ITEM, 1),
}  # fmt: skip


def refusal(op: str) -> UnsafePickleError:
    """The one wording of a refused opcode, for both readers."""
    if op in ("PERSID", "BINPERSID"):
        return UnsafePickleError(
            "refused to load: the pickle uses persistent ids, which memory snapshots never do "
            "(nothing was executed)"
        )
    return UnsafePickleError(
        f"refused to load: the pickle uses {op}, which calls or imports code; "
        "memory snapshots contain only plain data, so this file is not a safe snapshot "
        "(nothing was executed)"
    )


def check(data: Any, *, what: str, memory_limit: int, memo_limit: int) -> int:
    """Scan `data` (a whole pickle, bytes-like) before anything reads it; return the bytes
    the unpickler is estimated to allocate. Raises UnsafePickleError, SnapshotError
    (truncated, or a PUT index that is not a plain number) or LimitExceeded ('memo': a memo
    index past the limit; 'memory')."""
    fast = built()
    if fast is not None:
        result = fast.scan(data, memory_limit, memo_limit, COSTS)
    else:
        result = scan(data, memory_limit, memo_limit)
    raise_for(result, what=what, memory_limit=memory_limit, memo_limit=memo_limit)
    return int(result[2])


def raise_for(
    result: tuple[str, str, int, int], *, what: str, memory_limit: int, memo_limit: int
) -> None:
    """The error for a scan's result (nothing when it is "ok"): one wording for both
    readers (the compiled reader runs the same scan in its own pass: `_fastreader.ScanStop`)."""
    status, op, cost, pos = result
    if status == "refused":
        raise refusal(op)
    if status == "truncated":
        raise SnapshotError(f"{what} is truncated: the pickle ends before its STOP opcode")
    if status == "frame":
        raise SnapshotError(
            f"{what} is not a readable pickle (an opcode at byte {pos:,} runs past the end "
            "of its FRAME)"
        )
    if status == "bad-put":
        raise SnapshotError(f"{what} is not a readable pickle (a PUT index that is not a number)")
    if status == "memo":
        detail = f"a memo index of {cost - 1:,} at byte {pos:,}"
        raise LimitExceeded("memo", memo_limit, detail).at(what)
    if status == "memory":
        detail = f"the unpickler would need {cost:,} by byte {pos:,}"
        raise LimitExceeded("memory", memory_limit, detail).at(what)
    if status != "ok":  # "nomem": the scan's own few bytes a MARK could not be had
        raise SnapshotError(f"{what}: not enough memory to read it")


def scan(data: Any, memory_limit: int, memo_limit: int) -> tuple[str, str, int, int]:
    """The pass itself, in Python (for builds without the compiled reader; `_fastreader.scan`
    does the same in C): (status, refused opcode's name, estimated bytes, position), status
    one of ok, refused, truncated, frame (an opcode across a FRAME's end, or a FRAME
    inside one), bad-put, memo (the value is then the slots named), memory."""
    data = bytes(data)
    n = len(data)
    pos = 0
    cost = 0
    memo_top = -1  # largest memo index named so far
    memo_len = 0  # MEMOIZE's index: the entries so far
    limit = memory_limit or (1 << 62)
    memo_max = memo_limit or (1 << 62)
    marks: list[int] = []  # the stack's height at each open MARK
    height = peak = 0  # of the unpickler's stack
    unpack = struct.unpack_from
    fixed, counted, push, pop, from_mark = _FIXED, _COUNTED, _PUSH, _POP, _FROM_MARK
    frame_end = -1  # where the current FRAME ends (PEP 3154: no opcode crosses it)
    while pos < n:
        start = pos
        op = data[pos]
        pos += 1
        new_frame = -1
        if op == 0x2E:  # STOP: what follows is not read
            break
        if op in REFUSED:
            return "refused", REFUSED[op], _total(cost, memo_top, peak), pos - 1
        if op in _END_SCAN or op not in _OPCODES:
            if op in (0x63, 0x69):  # GLOBAL, INST: their two lines may not cross a frame
                first = data.find(b"\n", pos)
                second = data.find(b"\n", first + 1) if first >= 0 else -1
                if start < frame_end <= max(first, second):
                    return "frame", "", _total(cost, memo_top, peak), start
            break
        width = fixed.get(op)
        if width is not None:
            if pos + width > n:
                return "truncated", "", _total(cost, memo_top, peak), pos
            if op == 0x71 or op == 0x72:  # BINPUT, LONG_BINPUT
                idx = data[pos] if width == 1 else unpack("<I", data, pos)[0]
                memo_top = max(memo_top, idx)
                memo_len += 1
                if memo_top >= memo_max:
                    return "memo", "", memo_top + 1, pos - 1
            elif op == 0x4D and unpack("<H", data, pos)[0] > 256:  # not a cached int
                cost += INT
            elif op == 0x95:  # FRAME: it must fit, and may not start inside another
                length = unpack("<Q", data, pos)[0]
                if length > n - pos - 8:
                    return "truncated", "", _total(cost, memo_top, peak), pos + width
                if start < frame_end:
                    return "frame", "", _total(cost, memo_top, peak), start
                new_frame = pos + 8 + length
                cost += PER_READ_BYTE * length
            pos += width
        elif op in counted:
            width = counted[op]
            if pos + width > n:
                return "truncated", "", _total(cost, memo_top, peak), pos
            size = int.from_bytes(data[pos : pos + width], "little", signed=op in (0x54, 0x8B))
            pos += width
            if size < 0 or size > n - pos:
                return "truncated", "", _total(cost, memo_top, peak), pos
            cost += arg_cost(op, data[pos : pos + size])
            pos += size
        elif op in _LINE:
            end = data.find(b"\n", pos)
            if end < 0:
                return "truncated", "", _total(cost, memo_top, peak), pos
            if op == 0x70:  # PUT: plain digits only (int() would take " 1_0")
                line = data[pos:end]
                if not line.isdigit() or len(line) > 18:
                    return "bad-put", "", _total(cost, memo_top, peak), pos
                memo_top = max(memo_top, int(line))
                memo_len += 1
                if memo_top >= memo_max:
                    return "memo", "", memo_top + 1, pos - 1
            cost += WIDE_STR + PER_LINE_BYTE * (end - pos)
            pos = end + 1
        elif op == 0x94:  # MEMOIZE: stores at index len(memo)
            memo_top = max(memo_top, memo_len)
            memo_len += 1
            if memo_top >= memo_max:
                return "memo", "", memo_top + 1, pos - 1
        if start < frame_end < pos:  # the unpickler reads a frame whole, then the file
            return "frame", "", _total(cost, memo_top, peak), start
        if pos >= frame_end:
            frame_end = new_frame
        if op in push:
            cost += push[op]
            height += 1
            peak = max(peak, height)
        elif op == 0x28:  # MARK
            marks.append(height)
            cost += STACK_SLOT
        elif op in from_mark:
            new, per, left = from_mark[op]
            base = marks.pop() if marks else 0
            cost += new + per * max(height - base, 0)
            height = base + left
            peak = max(peak, height)
        elif op in pop:
            k, add, left = pop[op]
            cost += add
            height = max(height - k, 0) + left
        if _total(cost, memo_top, peak) > limit:
            return "memory", "", _total(cost, memo_top, peak), pos
    return "ok", "", _total(cost, memo_top, peak), pos


def arg_cost(op: int, arg: bytes) -> int:
    """What a counted argument's bytes cost beyond its value's own (the header in _PUSH)."""
    size = len(arg)
    if op in _TEXT and not arg.isascii():
        return PER_READ_BYTE * size + WIDE_STR + PER_WIDE_BYTE * size
    return (PER_READ_BYTE + (PER_LONG_BYTE if op in _LONGS else 1)) * size


def _total(cost: int, memo_top: int, peak: int) -> int:
    return BASE + cost + PER_MEMO_SLOT * (memo_top + 1) + STACK_SLOT * peak

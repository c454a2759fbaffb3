"""Issue 27: the compiled reader's stack and span hashes are keyed per process.

The reader remembers the bytes of each frames list it has read (a span) and the stacks it
has interned, in open-addressing tables. Their keys come from an untrusted file: with a
fixed hash a crafted file could choose bodies that all land in one run of slots, as it could
choose addresses against the replay's table (test_hash_flood.py). Both hashes are keyed with
16 bytes of os.urandom taken when the module is imported.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from memlens.snapshot.native import built

FAST = built()
pytestmark = pytest.mark.skipif(FAST is None, reason="compiled reader not built")
BODY = b"(h\x01h\x02h\x03e"  # a frames list's body: three memo references in one batch
SPAN_HASH = "from memlens.snapshot import _fastreader as f; print(f.span_hash(%r))"


def _in_a_new_process(body: bytes) -> int:
    out = subprocess.run(
        [sys.executable, "-c", SPAN_HASH % body], capture_output=True, text=True, check=True
    )
    return int(out.stdout)


def test_the_span_hash_is_a_function_of_the_bytes_in_one_process() -> None:
    assert FAST is not None
    assert FAST.span_hash(BODY) == FAST.span_hash(bytearray(BODY))
    assert FAST.span_hash(BODY) != FAST.span_hash(BODY[:-1] + b"a")
    assert FAST.span_hash(b"") != FAST.span_hash(b"\x00")  # the length is in the key


def test_each_process_keys_the_span_hash_anew() -> None:
    seen = {_in_a_new_process(BODY) for _ in range(3)}
    # a fixed function gives one value; keyed ones collide with odds of 2^-64
    assert len(seen) == 3

"""Issue 27 item 2: addresses chosen to collide in the compiled replay's hash.

The replay pairs allocations and frees with a hash map keyed by address. With a fixed hash
an attacker computes addresses that all fall into one run of slots, and 200,000
allocations (a 7 MB file) took 38 s instead of 0.1 s. The addresses here invert the hash
the replay used before (`a ^ a>>29`, times a constant, `^ >>32`) so that their low 20 bits
are equal: every one collides in any table of up to 2^20 slots.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from memlens.snapshot.actions import Action
from memlens.snapshot.native import built_replay
from memlens.snapshot.replay import device as replay

pytestmark = pytest.mark.skipif(built_replay() is None, reason="compiled replay not built")

M64 = (1 << 64) - 1
OLD_MULTIPLIER = 0xBF58476D1CE4E5B9


def _old_hash_preimage(h: int) -> int:
    """The address the old fixed hash sent to `h` (each of its three steps is invertible)."""
    x = h ^ (h >> 32)  # undo h ^= h >> 32
    x = (x * pow(OLD_MULTIPLIER, -1, 1 << 64)) & M64  # undo the multiply
    return x ^ (x >> 29) ^ (x >> 58)  # undo a ^ (a >> 29)


def _old_hash(a: int) -> int:
    h = (a ^ (a >> 29)) * OLD_MULTIPLIER & M64
    return h ^ (h >> 32)


def test_preimages_really_collided_in_the_old_hash() -> None:
    for k in (1, 2, 12345, 199_999):
        a = _old_hash_preimage(k << 20)
        assert _old_hash(a) == k << 20
        assert _old_hash(a) & ((1 << 20) - 1) == 0


def test_colliding_addresses_replay_in_linear_time() -> None:
    n = 200_000
    addr = np.array([_old_hash_preimage(k << 20) for k in range(1, n + 1)], dtype=np.uint64)
    assert len(np.unique(addr)) == n
    ev = {
        "action": np.full(n, Action.ALLOC, dtype=np.uint8),
        "addr": addr,
        "size": np.full(n, 512, dtype=np.int64),
        "stack": np.full(n, -1, dtype=np.int32),
        "stream": np.zeros(n, dtype=np.int32),
    }
    empty = replay._Candidates(
        np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32)
    )
    fast = built_replay()
    assert fast is not None
    start = time.perf_counter()
    out = fast.replay(
        **{k: ev[k] for k in ("action", "addr", "size", "stack", "stream")},
        **{f"ghost_{k}": v for k, v in empty._asdict().items()},
        alloc_code=int(Action.ALLOC),
        free_code=int(Action.FREE_COMPLETED),
        request_code=int(Action.FREE_REQUESTED),
        grow_codes=b"",
        shrink_codes=b"",
        requests_as_frees=True,
        end_reserved=None,
    )
    elapsed = time.perf_counter() - start
    # the map reseeds when a probe run passes 64: no run can grow with the input
    assert out["longest_probe"] <= 64
    assert elapsed < 5.0  # 38 s with the fixed hash; about 0.05 s keyed
    assert np.frombuffer(out["active_after"], dtype=np.int64)[-1] == 512 * n

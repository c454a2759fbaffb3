"""The backward of advanced indexing (`weight[ids, :]`, the cs336 script's embedding)
accumulates with `index_put_` on a GPU through the sort-based kernel, whose temporaries
(the linear index, the sorted indices and positions, `arange`, cub's 1-byte sort storage)
come from the caching allocator (simulation/patches/index_put_kernel.py). Compared with
the H200 recordings of tests/data/gpu/2026-11-28-h200, event for event."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.patches.index_put_kernel import NOT_MODELLED  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu" / "2026-11-28-h200"
VOCAB, D_MODEL, BATCH = 10000, 1024, 4
GRAD = VOCAB * D_MODEL * 4  # the zeros the gradient accumulates into: 40,960,000 B


def window(trace: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """From the gradient's zeros to the last temporary's free: the events around the
    first 1-byte allocation (cub's sort storage), segments left out."""
    events = [e for e in trace if not e["action"].startswith("segment")]
    sort = next(i for i, e in enumerate(events) if e["action"] == "alloc" and e["size"] == 1)
    start = max(
        i for i in range(sort) if events[i]["action"] == "alloc" and events[i]["size"] == GRAD
    )
    live: set[int] = set()
    for end in range(start + 1, len(events)):
        e = events[end]
        if e["action"] == "alloc":
            live.add(e["addr"])
        elif e["action"] == "free_completed":
            live.discard(e["addr"])
            if not live and end > sort:
                break
    return [(e["action"], e["size"]) for e in events[start : end + 1]]


def recorded(context: int) -> list[tuple[str, int]]:
    with gzip.open(DATA / f"cs336_medium_{context}_training.pickle.gz") as f:
        return window(pickle.load(f)["device_traces"][0])


def simulated(context: int) -> tuple[list[tuple[str, int]], list[str]]:
    with memlens.simulate(cublas_workspace=0) as sim:
        weight = torch.empty(VOCAB, D_MODEL, device="cuda", requires_grad=True)
        ids = torch.zeros(BATCH, context, dtype=torch.long, device="cuda")
        embedded = weight[ids, :]
        embedded.backward(torch.empty_like(embedded))
    assert sim.snapshot is not None
    return window(sim.snapshot["device_traces"][0]), sim.notes


@pytest.mark.parametrize("context", [384, 512])
def test_the_index_backward_takes_the_h200_recordings_temporaries(context):
    n = BATCH * context * 8  # one int64 per index
    expected = [
        ("alloc", GRAD),  # the zeros (IndexBackward's new_zeros)
        ("alloc", n), ("alloc", n),  # makeLinearIndex: remainder, then * stride
        ("free_requested", n), ("free_completed", n),  # the remainder
        ("alloc", n), ("alloc", n), ("alloc", n),  # sorted_indices, orig_indices, arange
        ("alloc", 1), ("free_requested", 1), ("free_completed", 1),  # cub's sort storage
        *[("free_requested", n), ("free_completed", n)] * 4,  # arange .. linear index
    ]  # fmt: skip
    assert recorded(context) == expected
    events, notes = simulated(context)
    assert events == expected
    assert NOT_MODELLED not in notes


def test_more_indices_than_one_sort_tile_are_noted_not_guessed():
    with memlens.simulate(cublas_workspace=0) as sim:
        weight = torch.empty(100, 8, device="cuda", requires_grad=True)
        ids = torch.zeros(2305, dtype=torch.long, device="cuda")  # one more than 256 x 9
        weight[ids].sum().backward()
        assert not any(e["size"] == 1 for e in sim.allocator.trace)
    assert NOT_MODELLED in sim.notes

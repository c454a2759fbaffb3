"""The snapshot's end state is what the script holds when it returns, taken before the
simulation tears anything down (issue 36).

Before, the script's globals were dropped first: what they held by reference count went
(AdamW's moments) while what sits in reference cycles stayed (FSDP2's sharded
parameters), so a rank's end state was neither the script's nor empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.distributed.env import World  # noqa: E402

SCRIPT = Path(__file__).with_name("fsdp_end_script.py")
P = 2 * 256 * 256 * 4  # the parameters, fp32: 524,288 bytes
WORKSPACE = 32 * 2**20  # cuBLAS's on Hopper, one per thread: forward and backward


def end_blocks(snapshot: dict[str, Any]) -> list[int]:
    return sorted(
        b["size"] for s in snapshot["segments"] for b in s["blocks"]
        if b["state"] == "active_allocated"
    )  # fmt: skip


@pytest.mark.parametrize("rank", [0, 3, 7])
def test_each_fsdp2_rank_ends_with_its_shards_moments_batch_and_workspaces(
    tmp_path, monkeypatch, rank
):
    for key, value in World(8).env(rank).items():
        monkeypatch.setenv(key, value)
    run = run_script(SCRIPT, [], tmp_path / "rank.pickle")
    blocks = end_blocks(run.whole)
    # 3P/8: each weight's 32-row shard (32,768 B) and its two AdamW moments; x (8 x 256
    # fp32); the two cuBLAS workspaces; AdamW's step counters live on the host
    shard = P // 2 // 8
    assert sum(blocks) == 3 * P // 8 + 8 * 256 * 4 + 2 * WORKSPACE
    assert blocks == sorted([shard] * 6 + [8 * 256 * 4] + [WORKSPACE] * 2)


def test_the_context_managers_end_state_is_the_blocks_state():
    with memlens.simulate(cublas_workspace=0) as sim:
        kept = torch.empty(1024, device="cuda")
        dropped = torch.empty(2048, device="cuda")
        del dropped
    assert sim.snapshot is not None and end_blocks(sim.snapshot) == [4096]
    del kept

"""The environment `torchrun` gives each rank, and which ranks to simulate. No torch here."""

from __future__ import annotations

import os
from dataclasses import dataclass

from memlens.errors import MemlensError

# the rendezvous directory of a job's object collectives, and the ranks it simulates
# (simulation/distributed/objects.py reads them in each rank's process)
RENDEZVOUS = "MEMLENS_RENDEZVOUS"
SIMULATED = "MEMLENS_SIMULATED_RANKS"
RENDEZVOUS_TIMEOUT = "MEMLENS_RENDEZVOUS_TIMEOUT"  # seconds a rank waits for a peer
MASTER_ADDR = "127.0.0.1"
MASTER_PORT = 29500  # torchrun's default --master-port


@dataclass(frozen=True)
class World:
    """`--nnodes` x `--nproc-per-node` ranks, numbered node by node as torchrun does."""

    nproc_per_node: int
    nnodes: int = 1
    master_addr: str = MASTER_ADDR
    master_port: int = MASTER_PORT

    def __post_init__(self) -> None:
        if self.nproc_per_node < 1 or self.nnodes < 1:
            raise MemlensError("--nproc-per-node and --nnodes must be at least 1")

    @property
    def size(self) -> int:
        return self.nproc_per_node * self.nnodes

    def env(self, rank: int) -> dict[str, str]:
        """What torchrun (torch.distributed.run, static rendezvous) exports to `rank`."""
        node, local = divmod(rank, self.nproc_per_node)
        env = {
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "GROUP_RANK": str(node),
            "ROLE_RANK": str(rank),
            "ROLE_NAME": "default",
            "WORLD_SIZE": str(self.size),
            "LOCAL_WORLD_SIZE": str(self.nproc_per_node),
            "GROUP_WORLD_SIZE": str(self.nnodes),
            "ROLE_WORLD_SIZE": str(self.size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": "none",
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": os.environ.get(
                "TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"
            ),
        }
        # torchrun's own default when several processes share a node
        if self.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
            env["OMP_NUM_THREADS"] = "1"
        return env

    def probe(self) -> list[int]:
        """What `--ranks` left out simulates: rank 0 and the last one. If the two run
        the same allocations, the job is taken as symmetric and the ranks between as
        rank 0 (docs/simulation.md says why these two)."""
        return sorted({0, self.size - 1})

    def pick(self, ranks: str | None) -> list[int]:
        """`--ranks`: None or "all" every rank; else "0,3,63" or ranges "0-3,8"."""
        if ranks is None or ranks.strip() == "all":
            return list(range(self.size))
        picked: list[int] = []
        for part in ranks.split(","):
            first, dash, last = part.strip().partition("-")
            try:
                lo = int(first)
                hi = int(last) if dash else lo
            except ValueError:
                raise MemlensError(
                    f"--ranks {ranks!r}: give 'all' or numbers and ranges, e.g. 0,3,8-11"
                ) from None
            if not 0 <= lo <= hi < self.size:
                raise MemlensError(
                    f"--ranks {ranks!r}: rank {hi if lo <= hi else lo} is outside the world "
                    f"of {self.size} (0 to {self.size - 1})"
                )
            picked.extend(r for r in range(lo, hi + 1) if r not in picked)
        return picked


def format_ranks(ranks: list[int]) -> str:
    """Ranks as runs: [0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)

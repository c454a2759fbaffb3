"""GPU presets for `memlens simulate --gpu NAME|generation`: what the simulation assumes.

Two figures change the snapshot: the cuBLAS workspace cuBLAS takes from the caching
allocator on the first GEMM of a thread (PyTorch's default CUBLAS_WORKSPACE_CONFIG is
":4096:8" = 32 MiB from compute capability 9.0 (Hopper) on, "4096:2,16:8" = 8 MiB +
128 KiB = 8,519,680 bytes before), and the card's memory (the limit before
torch.OutOfMemoryError; the CUDA context takes a few hundred MiB of it on a real card,
pass --device-memory with what torch.cuda.mem_get_info() reports there to be exact).
Name and compute capability are what torch.cuda.get_device_name / _capability answer;
the L2 cache size is `get_device_properties().L2_cache_size` (the size of the buffer
Inductor's Triton autotuning writes to flush the cache between benchmarks).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

from memlens.errors import MemlensError

MiB = 2**20
HOPPER_WORKSPACE = 32 * MiB
OLDER_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8  # 8,519,680


@dataclass(frozen=True)
class Gpu:
    key: str
    name: str
    capability: tuple[int, int]
    memory: int  # bytes, as nvidia-smi reports the card's total
    multiprocessors: int
    l2_cache: int = 0  # bytes, as get_device_properties().L2_cache_size answers

    @property
    def cublas_workspace(self) -> int:
        return HOPPER_WORKSPACE if self.capability >= (9, 0) else OLDER_WORKSPACE

    @property
    def max_threads_per_multiprocessor(self) -> int:
        """cudaDeviceProp.maxThreadsPerMultiProcessor (CUDA's table of compute capabilities):
        2048 on sm 7.0, 8.0, 9.0, 10.0; 1536 on sm 8.6, 8.7, 8.9, 12.x; 1024 on sm 7.5.
        ATen's reduction kernel sizes its grid by it (patches/reduce_kernel.py)."""
        if self.capability == (7, 5):
            return 1024
        if self.capability in ((8, 6), (8, 7), (8, 9)) or self.capability[0] == 12:
            return 1536
        return 2048

    @property
    def bf16(self) -> bool:
        return self.capability >= (8, 0)

    def describe(self) -> str:
        return (
            f"{self.name} (sm {self.capability[0]}.{self.capability[1]}, "
            f"{self.memory / 2**30:.1f} GiB, cuBLAS workspace {self.cublas_workspace:,} bytes)"
        )


GPUS = {
    g.key: g
    for g in (
        Gpu("h100", "NVIDIA H100 80GB HBM3", (9, 0), 81559 * MiB, 132, 50 * MiB),
        # memory as nvidia-smi reported it on the card of tests/data/gpu (README there)
        Gpu("h200", "NVIDIA H200", (9, 0), 143771 * MiB, 132, 60 * MiB),
        Gpu("a100", "NVIDIA A100-SXM4-80GB", (8, 0), 81920 * MiB, 108, 40 * MiB),
        Gpu("a100-40gb", "NVIDIA A100-SXM4-40GB", (8, 0), 40960 * MiB, 108, 40 * MiB),
        Gpu("a10", "NVIDIA A10", (8, 6), 23028 * MiB, 72, 6 * MiB),
        Gpu("l4", "NVIDIA L4", (8, 9), 23034 * MiB, 58, 48 * MiB),
        Gpu("rtx4090", "NVIDIA GeForce RTX 4090", (8, 9), 24564 * MiB, 128, 72 * MiB),
        Gpu("v100", "Tesla V100-SXM2-32GB", (7, 0), 32768 * MiB, 80, 6 * MiB),
        Gpu("t4", "Tesla T4", (7, 5), 15360 * MiB, 40, 4 * MiB),
    )
}
GENERATIONS = {
    "hopper": "h100",
    "ampere": "a100",
    "ada": "l4",
    "lovelace": "l4",
    "volta": "v100",
    "turing": "t4",
}
DEFAULT = "h100"


def gpu_preset(name: str | None) -> Gpu:
    """The preset for a card name or generation (case-insensitive); None: the default."""
    key = (name or DEFAULT).strip().lower().replace(" ", "")
    key = GENERATIONS.get(key, key)
    if key not in GPUS:
        known = ", ".join([*GPUS, *GENERATIONS])
        raise MemlensError(f"unknown GPU {name!r}: use one of {known}")
    return GPUS[key]


def cublas_workspace_from_config(config: str | None, default: int) -> int:
    """cuBLAS's per-handle workspace for a CUBLAS_WORKSPACE_CONFIG value, as PyTorch's
    `parseChosenWorkspaceSize` (aten/src/ATen/cuda/CublasHandlePool.cpp) reads it: every
    `:SIZE:COUNT` pair adds SIZE KiB x COUNT (`:4096:8` = 32 MiB, `:4096:2:16:8` =
    8,519,680 bytes); no variable gives the card's default; a value with no pair warns
    and gives the default, as PyTorch does. PyTorch reads it once, at the process's first
    GEMM, so a script may still set it before its first matmul."""
    if config is None:
        return default
    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    if not pairs:
        warnings.warn(
            f"Could not parse CUBLAS_WORKSPACE_CONFIG, using default workspace size of "
            f"{default} bytes.",
            stacklevel=2,
        )
        return default
    return sum(int(size) * 1024 * int(count) for size, count in pairs)

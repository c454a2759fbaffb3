"""`SimulateConfig`: every setting of a simulation with its default, written once.

`memlens.simulate(...)`, `memlens simulate` (its options carry the same names), the
notebook's `%%memlens simulate` and `run_script` all build one of these; the session reads
the resolved values from it. No torch here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memlens.analysis.allocator_model import AllocatorSettings
from memlens.errors import MemlensError
from memlens.keywords import field_names, with_options
from memlens.simulation.distributed.routing import Routing
from memlens.simulation.distributed.routing import parse as parse_routing
from memlens.simulation.gpus import Gpu, gpu_preset
from memlens.units import parse_bytes


@dataclass(frozen=True)
class SimulateConfig:
    """How a simulation models the card, the allocator and the recorder.

    - `gpu`: a card ("a100", "h100", "t4", ...) or a generation ("ampere", "hopper");
      default an H100 with unlimited memory. Sets the cuBLAS workspace, the device memory
      and what torch.cuda answers; `cublas_workspace` and `device_memory` override it.
    - `device_memory`: bytes or a size ("80GiB"); beyond it allocations raise
      torch.OutOfMemoryError after an `oom` trace entry. Default: the card's with `gpu`,
      else unlimited.
    - `cublas_workspace`: per thread, bytes or a size (0 omits it, and cuBLASLt's
      1 MiB one with it); default from
      $CUBLAS_WORKSPACE_CONFIG at the first GEMM, else the card's.
    - `alloc_conf`: a PYTORCH_CUDA_ALLOC_CONF string (default: the variable's value);
      `expandable_segments`, `max_split_size_mb` and `roundup_power2_divisions` (one value
      for every size) override it.
    - `stacks`: "python" (or "all": there are no C++ frames to record) or None ("none").
    - `max_entries`: keep only the newest trace entries, like the recorder's ring buffer.
    - `nvtx_annotations`: torch.cuda.nvtx ranges become annotations.
    - `early_stacks`: keep the stacks of blocks allocated before the code switched history
      on (the GPU recorder has none for them).
    - `routing`: what a mixture of experts' router chooses, which expert parallelism's
      token counts follow: "uniform" (default), "capacity:F", "worst" or
      "histogram:FILE" (simulation/distributed/routing.py).
    """

    device_memory: str | int | None = None
    stacks: str | None = "python"
    expandable_segments: bool | None = None
    max_split_size_mb: int | None = None
    roundup_power2_divisions: int | None = None
    alloc_conf: str | None = None
    cublas_workspace: str | int | None = None
    max_entries: int | None = None
    gpu: str | None = None
    nvtx_annotations: bool = True
    early_stacks: bool = False
    routing: str | None = None

    def __post_init__(self) -> None:
        if self.stacks not in (None, "python", "all", "none"):
            raise MemlensError(f"stacks must be 'python', 'all' or None, not {self.stacks!r}")
        if self.stacks == "none":  # the command line's spelling of None
            object.__setattr__(self, "stacks", None)
        # fail in the caller, not when the block starts
        self.card()
        self.device_memory_bytes()
        self.cublas_workspace_bytes()
        routing = self.routing_assumption()
        if routing.kind == "histogram":  # ranks may start in another directory
            object.__setattr__(self, "routing", f"histogram:{os.path.abspath(routing.source)}")

    @classmethod
    def of(cls, config: SimulateConfig | None, options: Mapping[str, Any]) -> SimulateConfig:
        """`config` (or the defaults) with the keywords given replacing its fields; an
        unknown keyword is a TypeError."""
        return with_options(cls, config, options, "memlens.simulate()")

    @classmethod
    def pick(cls, options: Mapping[str, Any]) -> SimulateConfig:
        """The config from the entries of `options` that are its fields (a parsed command
        line also holds other options)."""
        names = field_names(cls)
        return cls(**{k: v for k, v in options.items() if k in names})

    def card(self) -> Gpu:
        return gpu_preset(self.gpu)

    def device_memory_bytes(self) -> int | None:
        """The memory to simulate: `device_memory`, else the card's when `gpu` is given,
        else None (unlimited)."""
        if self.device_memory is not None:
            return parse_bytes(self.device_memory)
        return None if self.gpu is None else self.card().memory

    def cublas_workspace_bytes(self) -> int | None:
        """None: decided at the first GEMM (see Simulation.cublas_workspace)."""
        return None if self.cublas_workspace is None else parse_bytes(self.cublas_workspace)

    def allocator_conf(self) -> str:
        """The PYTORCH_CUDA_ALLOC_CONF the snapshot records: `alloc_conf`, else the
        variable's value now."""
        if self.alloc_conf is not None:
            return self.alloc_conf
        return os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")

    def routing_assumption(self) -> Routing:
        return parse_routing(self.routing)

    def allocator_settings(self) -> AllocatorSettings:
        settings = AllocatorSettings.parse(self.allocator_conf())
        if self.expandable_segments is not None:
            settings.expandable_segments = self.expandable_segments
        if self.max_split_size_mb is not None:
            settings.max_split_size = self.max_split_size_mb * 2**20
        if self.roundup_power2_divisions is not None:
            settings.roundup_power2_divisions = [self.roundup_power2_divisions] * 16
        return settings

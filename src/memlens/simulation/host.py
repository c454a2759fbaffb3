"""What the patches of torch (simulation/patches/, simulation/distributed/) use of the
simulation that installs them, as a Protocol. `Simulation` (session.py) imports every patch
module to install it; a patch module that named `Simulation` for its types would close a
loop back to it (a cycle of seven modules, if only at type-check time). Naming this leaf
instead keeps the import graph a tree at type-check time too, and says in one place what a
patch may touch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from memlens.analysis.allocator_model import CachingAllocator
    from memlens.simulation.distributed.routing import Routing
    from memlens.simulation.gpus import Gpu
    from memlens.simulation.patches.autocast import CudaAutocast
    from memlens.simulation.patches.frames import FrameCollector


class SimulationHost(Protocol):
    # read-only to a patch (a property here): the session may hold a subclass of the model
    @property
    def allocator(self) -> CachingAllocator: ...  # every simulated tensor lives in it

    @property
    def frames(self) -> FrameCollector: ...

    @property
    def gpu(self) -> Gpu: ...

    @property
    def autocast_policy(self) -> CudaAutocast: ...

    # the backend each F.scaled_dot_product_attention call took (flash, efficient, ...)
    sdpa_backends: list[str]
    # a compiled graph's runner runs an op: it places buffers itself
    in_compiled_graph: bool
    # True while DDP's reducer builds buckets: `cpu` in a factory op means the device
    cpu_options_mean_cuda: bool
    device_index: int
    routing: Routing  # expert parallelism's routing assumption (--routing)
    assumptions: dict[str, str]  # what the run assumed, written into the snapshot
    _live: dict[int, int]  # StorageImpl address -> block address
    _workspace_size: int | None

    @property
    def cublas_workspace(self) -> int: ...

    def note(self, text: str) -> None: ...

    def empty_cache(self) -> None: ...

    def build_snapshot(self, whole: bool = False) -> dict[str, Any]: ...

    def _track_outputs(self, out: Any) -> None: ...

    def holds(self, t: Any) -> bool: ...  # a fake CUDA tensor of the simulated program

    def _stack(self) -> list[dict[str, Any]]: ...

    def _malloc(self, nbytes: int, stack: list[dict[str, Any]] | None = None) -> int: ...

    def _on_storage_freed(self, key: int) -> None: ...

    def _ensure_workspace(self, lt: bool = False) -> None: ...

    def _cuda_api(self) -> dict[str, Any]: ...

"""Every public name of torch.cuda (and its memory, random, amp, nvtx submodules),
torch.backends.cuda / cudnn and torch.accelerator: what a simulation answers for it.

Each name either works as on a GPU (answered from the model: the allocator, the --gpu
card, a seed; or a no-op where a GPU call only changes how kernels run), or is refused
with one line naming it (`REFUSED`: user-made memory pools, NCCL, ...; CUDA graphs are cuda_graphs.py's; the
docs' "not supported" list is printed from that table). `session.Simulation._cuda_api`
holds the allocator-facing answers; this module adds the rest.
tests/simulate/test_simulate_cuda_surface.py walks every public name of those modules.
"""

from __future__ import annotations

import contextlib
import functools
import random
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from memlens.simulation.patches import cuda_stubs

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost
    from memlens.simulation.patches.fake_cuda import Patches

GRAPHS = "user-made memory pools are not modelled (CUDA graphs' pools are)"
KERNELS = "a captured CUDA graph's kernels are not simulated (its memory is)"
ALLOCATOR = "a pluggable allocator replaces the caching allocator memlens models"
REFUSED: dict[str, str] = {
    "torch.cuda.MemPool": GRAPHS,
    "torch.cuda.use_mem_pool": GRAPHS,
    "torch.cuda.memory.MemPool": GRAPHS,
    "torch.cuda.memory.use_mem_pool": GRAPHS,
    "torch.accelerator.Graph": "torch.accelerator.Graph is not modelled (torch.cuda.CUDAGraph is)",
    "torch.cuda.GreenContext": "green contexts (SM partitions) are not modelled",
    # torch >= 2.14: what a captured graph's kernels were (no kernel is captured here)
    "torch.cuda.export_dot": KERNELS,
    "torch.cuda.export_graph_data": KERNELS,
    "torch.cuda.graph_annotations": KERNELS,
    "torch.cuda.CUDAPluggableAllocator": ALLOCATOR,
    "torch.cuda.change_current_allocator": ALLOCATOR,
    "torch.cuda.memory.CUDAPluggableAllocator": ALLOCATOR,
    "torch.cuda.memory.change_current_allocator": ALLOCATOR,
    "torch.cuda.nccl": "NCCL called directly needs several devices (its version() answers)",
    "torch.cuda.jiterator": "jiterator compiles CUDA kernels, which do not run here",
    "torch.cuda.tunable": "TunableOp's tuning runs kernels, which do not run here",
    "torch.cuda.sparse": "the legacy torch.cuda.sparse tensor types are not simulated",
    "torch.backends.cuda.cufft_plan_cache": "cuFFT plans are not modelled",
}
for _kind in ("BFloat16", "Bool", "Byte", "Char", "ComplexDouble", "ComplexFloat", "Double",
              "Float", "Half", "Int", "Long", "Short"):  # fmt: skip
    REFUSED[f"torch.cuda.{_kind}Storage"] = "legacy typed storages are not simulated"

# Legacy tensor types: torch.cuda.FloatTensor(2, 3) and isinstance(x, torch.cuda.FloatTensor).
LEGACY_TENSORS = {
    "BFloat16Tensor": torch.bfloat16, "BoolTensor": torch.bool, "ByteTensor": torch.uint8,
    "CharTensor": torch.int8, "DoubleTensor": torch.float64, "FloatTensor": torch.float32,
    "HalfTensor": torch.float16, "IntTensor": torch.int32, "LongTensor": torch.int64,
    "ShortTensor": torch.int16,
}  # fmt: skip
# torch.backends.cudnn.version() of a CUDA 12 build of PyTorch 2.x: cuDNN 9.1.0
CUDNN_VERSION = 90100
# What PyTorch seeds every CUDA generator with until the code seeds it (default_rng_seed_val).
DEFAULT_SEED = 67280421310721


class NotSimulated(RuntimeError):
    """A torch.cuda feature a simulation does not model; the message is one line."""


def _message(name: str) -> str:
    return f"{name} is not supported by memlens simulate: {REFUSED[name]}"


class _RefusedClass(type):
    """A refused class stays a class (isinstance checks in library code keep working);
    making one, or any class attribute (`GreenContext.create`), raises the one line."""

    _memlens_name: str

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        raise NotSimulated(_message(cls._memlens_name))

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise NotSimulated(_message(cls._memlens_name))


# What torch.cuda.nccl.version() answers: the NCCL the CUDA wheel of torch 2.14.1 pins
# (nvidia-nccl-cu13 2.30.7). Trainers ask it to pick features (torchtitan); the
# collectives themselves are the fake process group's (simulation/distributed/).
NCCL_VERSION = (2, 30, 7)


class _Nccl(types.ModuleType):
    """torch.cuda.nccl: its version answers, its direct collectives are refused."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._memlens_name = name

    @staticmethod
    def version() -> tuple[int, int, int]:
        return NCCL_VERSION

    def __getattr__(self, attr: str) -> Any:
        raise NotSimulated(_message(self._memlens_name))


def _refuser(name: str, original: Any) -> Any:
    if name == "torch.cuda.nccl":
        return _Nccl(name)
    if isinstance(original, type):
        return _RefusedClass(
            original.__name__, (), {"_memlens_name": name, "__doc__": _message(name)}
        )
    if isinstance(original, types.ModuleType) or not callable(original):
        return _RefusedObject(name)

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise NotSimulated(_message(name))

    # The original's names and its __wrapped__: torch 2.14's Dynamo reads
    # torch.cuda.use_mem_pool.__wrapped__ when it is imported (its trace rules).
    functools.update_wrapper(refused, original)
    refused.__doc__ = _message(name)
    return refused


class _RefusedObject(types.ModuleType):
    """Stands for a refused module or object: any use of it raises the one line."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._memlens_name = name

    def __getattr__(self, attr: str) -> Any:
        raise NotSimulated(_message(self._memlens_name))

    def __getitem__(self, key: Any) -> Any:
        raise NotSimulated(_message(self._memlens_name))


class _LegacyTensorMeta(type):
    dtype: torch.dtype

    def __call__(cls, *args: Any, device: Any = None) -> torch.Tensor:
        # torch.cuda.FloatTensor(2, 3): uninitialized; (data): a copy; (): empty
        if len(args) == 1 and not isinstance(args[0], int):
            if isinstance(args[0], torch.Size):
                return torch.empty(args[0], dtype=cls.dtype, device="cuda")
            return torch.tensor(args[0], dtype=cls.dtype, device="cuda")
        return torch.empty(args or (0,), dtype=cls.dtype, device="cuda")

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor) and obj.is_cuda and obj.dtype == cls.dtype


def _legacy_tensor(name: str, dtype: torch.dtype) -> type:
    return _LegacyTensorMeta(name, (), {"dtype": dtype, "is_cuda": True})


class _Cudart:
    """torch.cuda.cudart(): the profiler's start/stop succeed (nothing runs to profile)."""

    def cudaProfilerStart(self) -> int:  # noqa: N802 (CUDA's names)
        return 0

    def cudaProfilerStop(self) -> int:  # noqa: N802
        return 0

    def cudaGetErrorString(self, code: Any) -> str:  # noqa: N802
        return f"CUDA error {int(code)}"


class CudaError(RuntimeError):
    """torch.cuda.CudaError without the CUDA runtime to name the code."""

    def __init__(self, code: int) -> None:
        super().__init__(f"CUDA error {code} (simulated)")


def _check_error(res: Any) -> None:
    if int(res) != 0:
        raise CudaError(int(res))


class Seeds:
    """The CUDA generator's seed (torch.cuda.manual_seed, seed, initial_seed): values are
    fake, but code that seeds, reads the seed back or saves the RNG state must run."""

    def __init__(self) -> None:
        self.generator = torch.Generator()
        self.generator.manual_seed(DEFAULT_SEED)

    def manual_seed(self, seed: int) -> None:
        self.generator.manual_seed(int(seed))

    def seed(self) -> None:
        self.generator.manual_seed(random.getrandbits(63))

    def initial_seed(self) -> int:
        return self.generator.initial_seed()


def answers(sim: SimulationHost) -> dict[str, Any]:
    """Working stand-ins, by name: `torch.cuda.X`, `torch.cuda.memory.X`,
    `torch.cuda.random.X`, `torch.accelerator.X`, `torch._C.X` (the compiled functions
    torch.backends.cuda calls)."""
    seeds = Seeds()
    alloc = sim.allocator
    api = sim._cuda_api()
    fraction = [1.0]
    sync_mode = [0]
    lt_workspace = [2**20]  # cuBLASLt's default: 1024 KiB (not allocated in the model)
    benchmark_limit = [10]  # torch.backends.cudnn.benchmark_limit's default
    total = sim.gpu.memory if alloc.device_memory is None else alloc.device_memory

    def set_fraction(value: float, device: Any = None) -> None:
        # PyTorch: the allocator may reserve at most fraction x the device's memory
        fraction[0] = float(value)
        alloc.device_memory = int(total * fraction[0])

    def raw_alloc(size: int, device: Any = None, stream: Any = None) -> int:
        return sim._malloc(int(size))

    def raw_delete(ptr: int) -> None:
        if ptr not in alloc.live:
            raise RuntimeError(f"invalid device pointer: {ptr}")
        alloc.free(ptr, sim._stack())

    def set_workspace(size: int) -> None:
        sim._workspace_size = int(size)

    seeding: dict[str, Callable[..., Any]] = {
        "manual_seed": seeds.manual_seed,
        "manual_seed_all": seeds.manual_seed,
        "seed": seeds.seed,
        "seed_all": seeds.seed,
        "initial_seed": seeds.initial_seed,
        "get_rng_state": api["get_rng_state"],
        "set_rng_state": api["set_rng_state"],
        "get_rng_state_all": lambda: [api["get_rng_state"]()],
        "set_rng_state_all": lambda new_states: None,
    }
    memory: dict[str, Any] = {
        "caching_allocator_alloc": raw_alloc,
        "caching_allocator_delete": raw_delete,
        "memory_snapshot": lambda mempool_id=None, include_traces=True: sim.build_snapshot()[
            "segments"
        ],
        "get_allocator_backend": lambda: "native",
        "get_per_process_memory_fraction": lambda device=None: fraction[0],
        "set_per_process_memory_fraction": set_fraction,
        "reset_accumulated_memory_stats": lambda device=None: None,
        "reset_accumulated_host_memory_stats": lambda: None,
        "reset_peak_host_memory_stats": lambda: None,
    }
    telemetry = {  # NVML's live readings: nothing runs, so the card is idle
        name: (lambda device=None: 0)
        for name in ("clock_rate", "memory_usage", "power_draw", "temperature", "utilization")
    }
    note = "GPU telemetry (torch.cuda.utilization, temperature, ...) answered 0: nothing runs"
    for name, fn in list(telemetry.items()):
        telemetry[name] = _noted(fn, sim, note)
    return {
        **{f"random.{k}": v for k, v in seeding.items()},
        **seeding,
        **{f"memory.{k}": v for k, v in memory.items()},
        **memory,
        **telemetry,
        "default_generators": (seeds.generator,),
        "device_memory_used": lambda device=None: alloc.reserved,
        "can_device_access_peer": lambda device, peer_device: False,
        "current_blas_handle": lambda: 0,
        "current_solver_handle": lambda: 0,
        "get_sync_debug_mode": lambda: sync_mode[0],
        "set_sync_debug_mode": lambda debug_mode: sync_mode.__setitem__(0, debug_mode),
        "ipc_collect": lambda: None,
        "set_stream": cuda_stubs.set_stream,
        "ExternalStream": cuda_stubs.ExternalStream,
        "get_stream_from_external": lambda data_ptr, device=None: cuda_stubs.ExternalStream(
            data_ptr
        ),
        "cudart": _Cudart,
        "check_error": _check_error,
        "profiler.cudart": _Cudart,
        "profiler.check_error": _check_error,
        # a CUDA build's answers (the CPU build says there is no CUDA, cuDNN, MAGMA)
        "has_magma": True,
        "get_arch_list": lambda: [f"sm_{sim.gpu.capability[0]}{sim.gpu.capability[1]}"],
        "get_gencode_flags": lambda: "-gencode compute=compute_{0}{1},code=sm_{0}{1}".format(
            *sim.gpu.capability
        ),
        "cudnn.is_available": lambda: True,
        "cudnn.version": lambda: CUDNN_VERSION,
        "backends.is_built": lambda: True,
        "CudaError": CudaError,
        **{name: _legacy_tensor(name, dtype) for name, dtype in LEGACY_TENSORS.items()},
        "_C._cuda_getCublasWorkspaceSize": lambda: sim.cublas_workspace,
        "_C._cuda_setCublasWorkspaceSize": set_workspace,
        "_C._cuda_get_cudnn_benchmark_limit": lambda: benchmark_limit[0],
        "_C._cuda_set_cudnn_benchmark_limit": lambda n: benchmark_limit.__setitem__(0, int(n)),
        "_C._cuda_getCublasLtWorkspaceSize": lambda: lt_workspace[0],
        "_C._cuda_setCublasLtWorkspaceSize": lambda size: lt_workspace.__setitem__(0, int(size)),
        **_accelerator(sim, api),
    }


def _noted(fn: Callable[..., Any], sim: SimulationHost, text: str) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        sim.note(text)
        return fn(*args, **kwargs)

    return wrapper


def _accelerator(sim: SimulationHost, api: dict[str, Any]) -> dict[str, Any]:
    """torch.accelerator answers for the simulated CUDA device."""
    cuda0 = torch.device("cuda", 0)
    dtypes = {
        torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16,
        torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128,
    }  # fmt: skip
    if sim.gpu.bf16:
        dtypes.add(torch.bfloat16)
    same = (
        "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
        "memory_stats", "reset_peak_memory_stats", "synchronize",
    )  # fmt: skip
    answers: dict[str, Any] = {name: api[name] for name in same}
    answers.update(
        {
            "current_accelerator": lambda check_available=False: cuda0,
            "is_available": lambda: True,
            "device_count": lambda: 1,
            "current_device_index": lambda: 0,
            "current_device_idx": lambda: 0,
            "set_device_index": lambda device: None,
            "set_device_idx": lambda device: None,
            "device_index": lambda device: contextlib.nullcontext(),
            "current_stream": lambda device=None: cuda_stubs.Stream.of(
                cuda_stubs.current_stream_id()
            ),
            "set_stream": cuda_stubs.set_stream,
            "empty_cache": sim.empty_cache,
            "empty_host_cache": lambda: None,
            "get_memory_info": api["mem_get_info"],
            "get_device_capability": lambda device=None: {"supported_dtypes": set(dtypes)},
            "reset_accumulated_memory_stats": lambda device=None: None,
        }
    )
    return {f"accelerator.{k}": v for k, v in answers.items()}


def _single_process_loading(patches: Patches, sim: SimulationHost) -> None:
    """DataLoader(num_workers > 0) runs its workers in the main process. Worker
    processes would inherit the fake tensor mode and fail to send their fake batches
    back; their batches are host memory, which a GPU snapshot does not show, so loading
    in the main process changes nothing on the device. pin_memory pins nothing (there is
    no host allocator to model), and the batches stay host tensors, as pinned ones do."""
    from torch.utils.data import DataLoader

    original = DataLoader._get_iterator

    def _get_iterator(loader: Any) -> Any:
        if loader.num_workers == 0:
            return original(loader)
        sim.note(
            "DataLoader workers ran in the main process (host memory; the device sees the same)"
        )
        workers, prefetch = loader.num_workers, loader.prefetch_factor
        object.__setattr__(loader, "num_workers", 0)
        object.__setattr__(loader, "prefetch_factor", None)
        try:
            return original(loader)
        finally:
            object.__setattr__(loader, "num_workers", workers)
            object.__setattr__(loader, "prefetch_factor", prefetch)

    patches.set(DataLoader, "_get_iterator", _get_iterator)


def _owner(name: str) -> tuple[Any, str]:
    """'torch.cuda.memory.X' -> (torch.cuda.memory, 'X')."""
    module_name, _, attr = name.rpartition(".")
    return sys.modules[module_name], attr


def install(patches: Patches, sim: SimulationHost) -> None:
    """Patch the working answers in and every refused name out."""
    import torch.accelerator
    import torch.backends.cuda
    import torch.backends.cudnn
    import torch.cuda.profiler
    import torch.cuda.random

    homes = {"": torch.cuda, "memory": torch.cuda.memory, "random": torch.cuda.random,
             "accelerator": torch.accelerator, "_C": torch._C, "profiler": torch.cuda.profiler,
             "cudnn": torch.backends.cudnn.m,  # type: ignore[attr-defined]
             "backends": torch.backends.cuda}  # fmt: skip
    for name, value in answers(sim).items():
        prefix, _, attr = name.rpartition(".")
        patches.set(homes[prefix], attr, value)
    _single_process_loading(patches, sim)
    for name in REFUSED:
        owner, attr = _owner(name)
        original = getattr(owner, attr, None)
        if original is not None:
            patches.set(owner, attr, _refuser(name, original))

"""Fake process groups inside a simulation: `dist.init_process_group` with any backend.

The script's own torch.distributed code runs unchanged on PyTorch's fake backend
(`FakeProcessGroup`: every collective completes at once, outputs keep their shape, dtype
and device, nothing is sent). What the collectives allocate is what the script and
PyTorch's own code allocate around them (NCCL's collectives are in place or write into
the output the caller passes, and its internal buffers are not the caching allocator's),
so the fake tensors and the allocator model see it all. Three things need help:

- the rank and world come from torchrun's environment (`memlens simulate
  --nproc-per-node`), as `env://` initialisation reads them; no store, no network;
- DDP's C++ reducer builds its gradient buckets with the options of a parameter, whose
  C++ device reads `cpu` on fake CUDA tensors (see fake_cuda): while it builds them, a
  factory op asked for `cpu` explicitly is made on the current CUDA device;
- `_verify_params_across_processes` reads tensor values (the parameters' shapes gathered
  from every rank): replaced by the same allocations in Python, with nothing to compare.
"""

from __future__ import annotations

import contextlib
import os
import sys
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch

from memlens.simulation.distributed import collectives, objects

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost
    from memlens.simulation.patches.fake_cuda import Patches

_FAKE = "fake"


def install(patches: Patches, sim: SimulationHost) -> None:
    """Patch torch.distributed (when this build has it) for the session `sim`."""
    import torch.distributed as dist

    if not dist.is_available():
        return
    # registers the "fake" backend with c10d (an import side effect)
    import torch.testing._internal.distributed.fake_pg as fake_pg

    original_init: Callable[..., Any] = dist.init_process_group
    asked: dict[str, str] = {}
    lazy: list[bool] = []  # the sharding patches, installed at the first group

    def init_process_group(
        backend: str | None = None,
        init_method: str | None = None,
        timeout: Any = None,
        world_size: int = -1,
        rank: int = -1,
        store: Any = None,
        group_name: str = "",
        pg_options: Any = None,
        device_id: Any = None,
        **kwargs: Any,
    ) -> None:
        # env:// (torchrun) reads these; an explicit rank or world size wins, as in c10d
        world = world_size if world_size != -1 else int(os.environ.get("WORLD_SIZE", "1"))
        me = rank if rank != -1 else int(os.environ.get("RANK", "0"))
        asked["backend"] = str(backend or "nccl")
        sim.note(
            f"torch.distributed ran on a fake process group (asked for {asked['backend']}): "
            "collectives move no data; their allocations are modelled from PyTorch's source"
        )
        if not lazy:
            lazy.append(True)
            _install_sharding(patches)
            _install_meta_propagation(patches, sim)
        if device_id is not None:
            torch.cuda.set_device(device_id)
        options = {} if timeout is None else {"timeout": timeout}
        original_init(
            _FAKE, store=fake_pg.FakeStore(), world_size=world, rank=me,
            group_name=group_name, **options,
        )  # fmt: skip

    original_new_group: Callable[..., Any] = dist.new_group

    def new_group(*args: Any, **kwargs: Any) -> Any:
        # a subgroup asking for gloo or nccl would open a real one: every group is fake
        kwargs.pop("backend", None)
        kwargs.pop("pg_options", None)
        if len(args) > 2:
            args = (*args[:2], None, *args[4:])
        return original_new_group(*args, **kwargs)

    original_get_backend: Callable[..., Any] = dist.get_backend

    def get_backend(group: Any = None) -> Any:
        # what the script asked for (it may branch on "nccl"), not the stand-in
        got = original_get_backend(group)
        return asked.get("backend", got) if got == _FAKE else got

    patches.set(dist, "init_process_group", init_process_group)
    patches.set(dist.distributed_c10d, "init_process_group", init_process_group)
    # init_device_mesh initialises the default group itself, through its own import
    import torch.distributed.device_mesh as device_mesh

    patches.set(device_mesh, "init_process_group", init_process_group)
    patches.set(dist, "new_group", new_group)
    patches.set(dist.distributed_c10d, "new_group", new_group)
    patches.set(dist, "get_backend", get_backend)
    patches.set(dist, "_verify_params_across_processes", _verify_params)
    patches.set(dist, "Reducer", _reducer_class(dist.Reducer, sim))
    # a node's GPUs, as torchrun's ranks see them; set_device picks this rank's
    devices = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    patches.set(torch.cuda, "device_count", lambda: devices)
    patches.set(torch.accelerator, "device_count", lambda: devices)
    patches.set(torch.accelerator, "current_device_index", lambda: sim.device_index)
    patches.set(torch.accelerator, "set_device_index", torch.cuda.set_device)
    _install_device_mesh(patches)
    _install_storage_resize(patches, sim)
    objects.install(patches, sim)  # object collectives between the ranks' processes
    collectives.install(patches)  # a Work keeps its tensors until wait()
    patches.on_restore(_destroy_groups)
    # init_process_group wraps sys.excepthook to prefix "[rankN]:"; put it back after
    patches.set(sys, "excepthook", sys.excepthook)


def _install_sharding(patches: Patches) -> None:
    """What DTensor, tensor parallel and FSDP2 need, installed when the script makes
    its first process group (importing DTensor costs seconds; a script without
    torch.distributed should not pay it)."""
    # FSDP2's default mesh and DTensor ask the build for its accelerator: a CPU build's
    # is the CPU
    cuda = torch.device("cuda")
    patches.set(torch._C, "_get_accelerator", lambda check=False: cuda)
    # A DTensor's C++ constructor copies its local tensor's C++ device, `cpu` on fakes
    # (see fake_cuda): in Python it answers its local tensor's, as on a GPU.
    from torch.distributed.tensor import DTensor

    patches.set(DTensor, "device", property(lambda self: self._local_tensor.device))
    patches.set(DTensor, "is_cuda", property(lambda self: self._local_tensor.device.type == "cuda"))
    _install_fsdp_device_id(patches)
    # init_device_mesh where modules imported it by name before the simulation began
    # (FSDP2's default mesh): its arange of the ranks must be real before DeviceMesh
    # sees it
    import torch.distributed.device_mesh as device_mesh

    host = device_mesh.init_device_mesh
    original = getattr(host, "__wrapped__", host)
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if (
            name.startswith("torch.distributed")
            and getattr(module, "init_device_mesh", None) is original
        ):
            patches.set(module, "init_device_mesh", host)


def _install_fsdp_device_id(patches: Patches) -> None:
    """FSDP's `device_id=torch.cuda.current_device()` (PyTorch's FSDP tutorial) is read as
    `torch.device(device_id)`, which a CPU-only build refuses for a bare index (it has no
    accelerator; simulation/patches/device_index.py): it is the CUDA device of that index,
    as a CUDA build reads it."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    original = FullyShardedDataParallel.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        index = kwargs.get("device_id")
        if isinstance(index, int) and not isinstance(index, bool):
            kwargs["device_id"] = torch.device("cuda", index)
        original(self, *args, **kwargs)

    patches.set(FullyShardedDataParallel, "__init__", __init__)


def _install_meta_propagation(patches: Patches, sim: SimulationHost) -> None:
    """DTensor's sharding propagation runs each new op once on tensors of the global
    shape to learn its output's, in a fake mode (no memory on a GPU); here it finds the
    simulation's own fake mode and would count them as allocations. Its outputs are not
    tracked, as a compiled graph's are not (the same switch)."""
    from torch.distributed.tensor._sharding_prop import ShardingPropagator

    original: Callable[..., Any] = ShardingPropagator._propagate_tensor_meta_non_cached

    def propagate(self: Any, op_schema: Any) -> Any:
        saved = sim.in_compiled_graph
        sim.in_compiled_graph = True
        try:
            return original(self, op_schema)
        finally:
            sim.in_compiled_graph = saved

    patches.set(ShardingPropagator, "_propagate_tensor_meta_non_cached", propagate)


def _install_storage_resize(patches: Patches, sim: SimulationHost) -> None:
    """`untyped_storage().resize_(0)` frees a CUDA storage's memory while its tensor
    lives on, and `resize_(n)` allocates it again: how FSDP (1 and 2) frees unsharded
    parameters after use and brings them back for the next all-gather
    (`free_storage` / `alloc_storage`). On a GPU each is a caching-allocator free and
    malloc; here the same, on the block the session tracks for that storage."""
    original: Callable[..., Any] = torch.UntypedStorage.resize_
    emptied: set[int] = set()  # tracked CUDA storages resized to 0, alive

    def resize_(storage: Any, size: int) -> Any:
        key = storage._cdata
        out = original(storage, size)
        if size == 0 and key in sim._live:
            emptied.add(key)
            sim._on_storage_freed(key)
            weakref.finalize(storage, emptied.discard, key)
        elif size > 0 and key in emptied:
            emptied.discard(key)
            sim._live[key] = sim._malloc(size)
        return out

    patches.set(torch.UntypedStorage, "resize_", resize_)


def _on_host(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` run with the fake mode off: its CPU tensors are real ones, with values."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def host(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            # Dynamo tracing compiled code that asks the mesh (torchtitan's expert-parallel
            # dispatch, `ep_mesh.get_group()`): it traces the method itself, as on a GPU,
            # and cannot trace the fake mode's switch
            return fn(*args, **kwargs)
        with unset_fake_temporarily():
            return fn(*args, **kwargs)

    host.__wrapped__ = fn  # type: ignore[attr-defined]
    return host


def _install_device_mesh(patches: Patches) -> None:
    """A DeviceMesh is bookkeeping on host tensors (the ranks' layout, `nonzero` to find
    this rank's coordinates): values it needs, which fake tensors do not have. Every
    method of the class, and init_device_mesh, runs with the fake mode off; its process
    groups are fake ones all the same."""
    import torch.distributed.device_mesh as device_mesh

    cls = device_mesh.DeviceMesh
    for name, value in list(vars(cls).items()):
        if isinstance(value, property) and value.fget is not None:
            wrapped = property(_on_host(value.fget), value.fset, value.fdel, value.__doc__)
            patches.set(cls, name, wrapped)
        elif isinstance(value, staticmethod | classmethod):  # callable too: first
            patches.set(cls, name, type(value)(_on_host(value.__func__)))
        elif callable(value) and not isinstance(value, type):
            patches.set(cls, name, _on_host(value))
    # imported by name later (torch.distributed.tensor, FSDP2), it is this one; modules
    # that imported it before are patched with the first process group
    patches.set(device_mesh, "init_device_mesh", _on_host(device_mesh.init_device_mesh))


def _destroy_groups() -> None:
    """A script that never called destroy_process_group leaves the default group behind;
    the next simulation in this process starts without one, as a new process would."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def _verify_params(process_group: Any, params: list[torch.Tensor], logger: Any = None) -> None:
    """The allocations of c10d's verify_params_across_processes (reducer.cpp), in its
    order: the parameter count on the device, one output per rank for its all-gather,
    then the shapes and strides (two int64 per dimension) copied to the device and
    broadcast. All are freed when it returns (locals, newest first)."""
    device = params[0].device
    count = torch.tensor([len(params)], dtype=torch.int64, device=device)
    gathered = [torch.empty_like(count) for _ in range(process_group.size())]
    n = sum(2 * p.dim() for p in params)
    metadata_dev = torch.empty(n, dtype=torch.int64).clone().to(device)
    del metadata_dev, gathered, count


_DTENSOR_MODULE = "torch.distributed.tensor"


def any_dtensor_type(types: Iterable[type]) -> bool:
    """Whether a dispatch mode's `types` (the classes of the tensor subclasses among an
    op's arguments) name DTensor, without flattening the arguments: the tracker then lets
    it run the op on its local tensors (which come back through the tracker) rather than
    see the wrapper, which owns no storage.

    DTensor is looked up, not imported: importing torch.distributed.tensor costs about a
    second of CPU, which a script that never makes one should not pay (and while it is
    not imported, no tensor is a DTensor)."""
    module = sys.modules.get(_DTENSOR_MODULE)
    dtensor = getattr(module, "DTensor", None)  # None while the module is half imported
    return dtensor is not None and any(issubclass(t, dtensor) for t in types)


def is_factory(func: Any) -> bool:
    """An aten op that makes a tensor on a device it is given (empty, zeros, ...)."""
    return any(a.name == "device" and a.kwarg_only for a in func._schema.arguments)


def reducer_factory(
    sim: SimulationHost, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """A factory op run while the reducer builds buckets. Its device tensors name the
    parameters' device, `cpu` here: made on the current CUDA device. Its host tensors
    name none (the bucket indices it writes and reads back through an accessor after
    broadcasting them from rank 0): made real, so that they hold their values; every
    rank computes the same ones, so rank 0's are this rank's."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    device = kwargs.get("device")  # left out when None (the dispatcher drops defaults)
    if device is None:
        with unset_fake_temporarily():
            return func(*args, **kwargs)
    if torch.device(device).type == "cpu":
        kwargs = {**kwargs, "device": torch.device("cuda", sim.device_index)}
    out = func(*args, **kwargs)
    sim._track_outputs(out)
    return out


@contextlib.contextmanager
def _factories_on_device(sim: SimulationHost) -> Iterator[None]:
    saved = sim.cpu_options_mean_cuda
    sim.cpu_options_mean_cuda = True
    try:
        yield
    finally:
        sim.cpu_options_mean_cuda = saved


def _reducer_class(base: Any, sim: SimulationHost) -> Any:
    """dist.Reducer, building its buckets on the device (at construction and when DDP
    rebuilds them in the order of the first backward) and its used-parameters map
    (find_unused_parameters at construction, static_graph when DDP sets it)."""

    class Reducer(base):  # type: ignore[misc]  # a pybind11 class
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            with _factories_on_device(sim):
                super().__init__(*args, **kwargs)

        def _rebuild_buckets(self) -> bool:
            with _factories_on_device(sim):
                return bool(super()._rebuild_buckets())

        def _set_static_graph(self) -> None:
            # it makes the used-parameters map, on the host and on the device
            with _factories_on_device(sim):
                super()._set_static_graph()

    return Reducer

"""Object collectives that carry real objects between simulated ranks.

`broadcast_object_list`, `all_gather_object`, `gather_object`, `scatter_object_list`,
`send_object_list` and `recv_object_list` serialise Python objects into byte tensors
and read their sizes back with `.item()`; on the fake process group nothing moves and
values are fake, so a rank would unpickle nothing. Pipeline parallelism exchanges its
stages' shapes this way, trainers their configuration. Here each rank's process
publishes what it sends as a file in a rendezvous directory the launcher gives every
rank of a job (`MEMLENS_RENDEZVOUS`), named by the group, the call's sequence number in
that group (every rank calls collectives in the same order, as NCCL requires) and the
sender; the receivers read it. A fake tensor inside an object travels as its shape,
strides, dtype and device and is made anew on the receiver, as unpickling a CUDA tensor
allocates it on a GPU.

A sender that is not simulated (`--ranks` left it out: `MEMLENS_SIMULATED_RANKS`), or
that does not publish within `MEMLENS_RENDEZVOUS_TIMEOUT` seconds (a pool with fewer
workers than ranks runs them one after another), is answered by the symmetric
assumption the launcher makes anyway: the receiving rank's own object, with a note.
Without a launcher (one process) every peer is answered that way.

Not modelled: the byte tensors the real functions allocate on the device for the
serialised objects and their sizes (a few hundred bytes to kilobytes, freed at once).
"""

from __future__ import annotations

import io
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from memlens.simulation.distributed.env import RENDEZVOUS, RENDEZVOUS_TIMEOUT, SIMULATED

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost
    from memlens.simulation.patches.fake_cuda import Patches

_NOTE = (
    "torch.distributed object collectives: a peer rank that was not simulated (or did not "
    "answer) was assumed to hold this rank's object"
)


def _fake_tensor(shape: Any, stride: Any, dtype: Any, device: str, grad: bool) -> Any:
    made = torch.empty_strided(shape, stride, dtype=dtype, device=device)
    return made.requires_grad_(grad) if grad else made


class _Pickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, FakeTensor):
            spec = (tuple(obj.shape), obj.stride(), obj.dtype, str(obj.device), obj.requires_grad)
            return _fake_tensor, spec
        return NotImplemented


# What a received object may name: plain data, the fake tensors this module sends, shapes
# and dtypes (what pipeline stages and trainers exchange). Anything else is refused, as a
# hostile file would be: the rank then keeps its own object (a note says so).
_GLOBALS = {
    ("memlens.simulation.distributed.objects", "_fake_tensor"),
    ("torch", "Size"),
    ("collections", "OrderedDict"),
    *(("builtins", n) for n in ("set", "frozenset", "complex", "slice", "range", "bytearray")),
    # the pipeline stages' shape exchange (torch.distributed.pipelining's stage.py sends
    # these dataclasses of shapes, strides, dtypes and placements with send_object_list)
    *(
        ("torch.distributed.pipelining._utils", n)
        for n in ("_StageForwardMeta", "_StageBackwardMeta", "_TensorMeta", "_DTensorMeta")
    ),
    *(
        ("torch.distributed.tensor.placement_types", n)
        for n in ("Shard", "Replicate", "Partial", "_StridedShard")
    ),
}


class _Loader(pickle.Unpickler):
    """Reads what a peer rank published: only the globals of _GLOBALS and torch's dtypes."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _GLOBALS or (
            module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused {module}.{name} from a peer rank")


def _dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=4).dump(obj)
    return buffer.getvalue()


class Rendezvous:
    """This rank's view of the job's rendezvous directory."""

    def __init__(self, sim: SimulationHost):
        self.sim = sim
        root = os.environ.get(RENDEZVOUS)
        self.root = Path(root) if root else None
        simulated = os.environ.get(SIMULATED)
        self.simulated = {int(r) for r in simulated.split(",")} if simulated else None
        self.timeout = float(os.environ.get(RENDEZVOUS_TIMEOUT, "600"))
        self.calls: dict[str, int] = {}

    def key(self, group: Any, kind: str) -> str:
        """The next call's name in `group`: the same on every rank that makes it."""
        import torch.distributed as dist

        name = dist.distributed_c10d._get_process_group_name(_group(group))
        label = f"{name}-{kind}"
        self.calls[label] = self.calls.get(label, 0) + 1
        return f"{label}-{self.calls[label]}"

    def publish(self, key: str, sender: int, obj: Any) -> None:
        if self.root is None:
            return
        # private: only this user's rank processes write the objects they read back
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        final = self.root / f"{key}.from{sender}"
        partial = final.with_suffix(".part")
        partial.write_bytes(_dumps(obj))
        os.replace(partial, final)  # readers never see half a file

    def fetch(self, key: str, sender: int, own: Any) -> Any:
        """What `sender` published as `key`, or `own` when it cannot answer."""
        if self.root is not None and (self.simulated is None or sender in self.simulated):
            path = self.root / f"{key}.from{sender}"
            deadline = time.monotonic() + self.timeout
            while time.monotonic() < deadline:
                if path.exists():
                    try:  # plain data only (_Loader): nothing a file names can run
                        return _Loader(io.BytesIO(path.read_bytes())).load()
                    except pickle.UnpicklingError as exc:
                        self.sim.note(f"{_NOTE}: {exc}")
                        return own
                time.sleep(0.05)
        self.sim.note(_NOTE)
        return own


def _group(group: Any) -> Any:
    """The group a call names, the default one when it names none."""
    import torch.distributed as dist

    return group if group is not None else dist.group.WORLD


def _me(group: Any) -> tuple[int, list[int]]:
    """(this rank's global rank, the group's global ranks)."""
    import torch.distributed as dist

    return dist.get_rank(), list(dist.get_process_group_ranks(_group(group)))


def _global(group: Any, rank: int | None, group_rank: int | None) -> int:
    import torch.distributed as dist

    if group_rank is not None:
        return int(dist.get_global_rank(_group(group), group_rank))
    return 0 if rank is None else rank


def functions(rv: Rendezvous) -> dict[str, Callable[..., Any]]:
    """The torch.distributed object collectives, over `rv`."""

    # Every function takes torch's whole signature, also what changes nothing here:
    # weights_only (torch 2.14: the receiver's unpickler is restricted; this one's always
    # is) and use_batch (send/recv: a batched P2P transport; pipeline parallelism passes it).
    def all_gather_object(
        object_list: list[Any], obj: Any, group: Any = None, weights_only: bool = False
    ) -> None:
        me, ranks = _me(group)
        key = rv.key(group, "all_gather")
        rv.publish(key, me, obj)
        for i, rank in enumerate(ranks):
            object_list[i] = obj if rank == me else rv.fetch(key, rank, obj)

    def gather_object(
        obj: Any,
        object_gather_list: list[Any] | None = None,
        dst: int | None = None,
        group: Any = None,
        group_dst: int | None = None,
        weights_only: bool = False,
    ) -> None:
        me, ranks = _me(group)
        key = rv.key(group, "gather")
        rv.publish(key, me, obj)
        if me == _global(group, dst, group_dst) and object_gather_list is not None:
            for i, rank in enumerate(ranks):
                object_gather_list[i] = obj if rank == me else rv.fetch(key, rank, obj)

    def broadcast_object_list(
        object_list: list[Any],
        src: int | None = None,
        group: Any = None,
        device: Any = None,
        group_src: int | None = None,
        weights_only: bool = False,
    ) -> None:
        me, _ = _me(group)
        source = _global(group, src, group_src)
        key = rv.key(group, "broadcast")
        if me == source:
            rv.publish(key, me, list(object_list))
        else:
            object_list[:] = rv.fetch(key, source, list(object_list))

    def scatter_object_list(
        scatter_object_output_list: list[Any],
        scatter_object_input_list: list[Any] | None = None,
        src: int | None = None,
        group: Any = None,
        group_src: int | None = None,
        weights_only: bool = False,
    ) -> None:
        me, ranks = _me(group)
        source = _global(group, src, group_src)
        key = rv.key(group, "scatter")
        if me == source:
            rv.publish(key, me, list(scatter_object_input_list or []))
            chosen = list(scatter_object_input_list or [None] * len(ranks))
        else:
            chosen = rv.fetch(key, source, None)
        own = scatter_object_output_list[0] if scatter_object_output_list else None
        scatter_object_output_list[0] = own if chosen is None else chosen[ranks.index(me)]

    def send_object_list(
        object_list: list[Any],
        dst: int | None = None,
        group: Any = None,
        device: Any = None,
        group_dst: int | None = None,
        use_batch: bool = False,
        weights_only: bool = False,
    ) -> None:
        me, _ = _me(group)
        target = _global(group, dst, group_dst)
        rv.publish(rv.key(group, f"p2p-{me}-{target}"), me, list(object_list))

    def recv_object_list(
        object_list: list[Any],
        src: int | None = None,
        group: Any = None,
        device: Any = None,
        group_src: int | None = None,
        use_batch: bool = False,
        weights_only: bool = False,
    ) -> int:
        me, _ = _me(group)
        source = _global(group, src, group_src)
        object_list[:] = rv.fetch(rv.key(group, f"p2p-{source}-{me}"), source, list(object_list))
        return source

    return {
        "all_gather_object": all_gather_object,
        "gather_object": gather_object,
        "broadcast_object_list": broadcast_object_list,
        "scatter_object_list": scatter_object_list,
        "send_object_list": send_object_list,
        "recv_object_list": recv_object_list,
    }


def install(patches: Patches, sim: SimulationHost) -> None:
    """Replace the object collectives of torch.distributed (and its c10d module)."""
    import torch.distributed as dist

    for name, fn in functions(Rendezvous(sim)).items():
        patches.set(dist, name, fn)
        patches.set(dist.distributed_c10d, name, fn)

"""c10d's collectives on fake tensors: outputs as given, a completed Work, and the
buffers ProcessGroupNCCL allocates itself.

Under FakeTensorMode the c10d ops run their Meta kernels (torch/distributed/
_meta_registrations.py), which answer a FakeWork whose future holds nothing; DDP's
reducer reads the reduced bucket from that future (comm.cpp's extractTensors), so the
Work handed back here is completed with the op's outputs, as ProcessGroupNCCL completes
its future with `outputs_`. NCCL itself allocates through the caching allocator only in
these places (ProcessGroupNCCL.cpp), modelled here, each freed when the op completes:

- `allgather_` into a list of equal-sized outputs: the outputs flattened into one
  buffer of world x input (`newLikeFlat`), copied out afterwards;
- `reduce_scatter_` from lists of equal-sized inputs: the inputs flattened likewise;
- `barrier`: a one-element float32 tensor on the device, all-reduced.

Every other collective (all_reduce, broadcast, reduce, the `_base` and `into_tensor`
forms, all_to_all_single, send/recv) works in place or into the caller's tensors.

The `Work` keeps the collective's tensors (its inputs, outputs and the flat buffer)
until `wait()`, as ProcessGroupNCCL's `stashed_for_allocator_safety_` does since it
stopped calling recordStream (pytorch PRs #148590, #150079): a tensor the script drops
before waiting stays allocated until then. The synchronous form waits at once. A `Work`
nobody waits on from Python (the script dropped it, or C++ holds it: DDP's reducer)
gives its tensors back at the next collective, as ProcessGroupNCCL's watchdog hands the
stash of a finished work to the main thread's next call into the group (#194701). The
simulation's works are complete at once, so only these two points matter. Nothing
blocks: the Work is c10d's own future-wrapping one, already complete (a Python subclass
of Work hung the rank: once the script no longer held the Python object, C++ called the
base class's wait, which waits for a completion nobody signals); the stash is a table
of the Work objects it keeps alive, emptied by a patched `Work.wait`.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch
from torch.utils._pytree import tree_flatten

if TYPE_CHECKING:
    from memlens.simulation.distributed.values import Values
    from memlens.simulation.host import SimulationHost
    from memlens.simulation.patches.fake_cuda import Patches

_c10d = torch.ops.c10d
# a functional collective's wait: its schema declares no alias, so the fake mode answers
# a new tensor of the same size; the kernel (Functional.cpp) answers its argument
WAIT_TENSOR = torch.ops._c10d_functional.wait_tensor.default


def _flat_like(sim: SimulationHost, tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """newLikeFlat: one buffer shaped (len(tensors), *tensors[0].shape) on their device,
    when they are CUDA tensors of one size (otherwise NCCL takes another path)."""
    # FakeTensor's is_cuda is patched to read its fake device
    if not tensors or not all(t.is_cuda for t in tensors):
        return None
    first = tensors[0]
    if any(t.shape != first.shape for t in tensors):
        return None
    flat = torch.empty((len(tensors), *first.shape), dtype=first.dtype, device=first.device)
    sim._track_outputs(flat)
    return flat


def _barrier_tensor(sim: SimulationHost) -> torch.Tensor:
    tensor = torch.zeros(1, dtype=torch.float32, device=torch.device("cuda", sim.device_index))
    sim._track_outputs(tensor)
    return tensor


def _only_ours(work: Any) -> bool:
    # the table's tuple, the caller's loop variable, this parameter and getrefcount's
    # own argument: nothing else holds the Python object
    return sys.getrefcount(work) <= 4


class Stash:
    """The Works whose tensors are kept until `wait()`: id(Work) -> (Work, tensors). The
    Work itself is kept so that the object the script gets back is this one (pybind
    answers the live Python object of a C++ Work) and its id stays its own."""

    def __init__(self) -> None:
        self.held: dict[int, tuple[Any, list[torch.Tensor]]] = {}

    def keep(self, value: Any, tensors: list[torch.Tensor]) -> Any:
        """A completed Work (boxed for the dispatcher) whose future holds `value`, keeping
        `tensors` until it is waited on."""
        from torch._C._distributed_c10d import (  # type: ignore[attr-defined]
            _create_work_from_future,
        )

        future: torch.futures.Future[Any] = torch.futures.Future()
        future.set_result(value)
        work = _create_work_from_future(future)
        if tensors:
            self.held[id(work)] = (work, tensors)
        return work.boxed()

    def release(self, work: Any) -> None:
        self.held.pop(id(work), None)

    def release_unheld(self) -> None:
        """The watchdog's hand-back: Works only this table refers to (the script dropped
        them, or C++ holds them) free their tensors at the next call into a group."""
        for key in [k for k, (work, _) in self.held.items() if _only_ours(work)]:
            del self.held[key]

    def clear(self) -> None:
        self.held.clear()


# frames between torch.distributed's Python API and this module: the dispatch modes'
_PASSING = (
    "/memlens/simulation/",
    "/torch/utils/_python_dispatch.py",
    "/torch/_ops.py",
    # torch._disable_dynamo around __torch_dispatch__
    "/torch/_dynamo/eval_frame.py",
    "/torch/_compile.py",
)
_PYTHON_API = "/torch/distributed/distributed_c10d.py"


def _called_from_python_api() -> bool:
    """The collective was called by torch.distributed's Python functions (dist.all_reduce,
    FSDP2's async all-gather), which hand the Work to Python or wait on it there; not by
    C++ (DDP's broadcast_coalesced, its reducer), which waits in C++ where the patched
    `wait` does not see it, as at once."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if not any(part in name for part in _PASSING):
            return name.endswith(_PYTHON_API)
        frame = frame.f_back
    return False


# one simulation runs in a process at a time (its patches are process-wide)
STASH = Stash()


def install(patches: Patches) -> None:
    """Patch Work.wait to release the tensors a Work keeps; the stash empties when the
    simulation ends."""
    import torch.distributed as dist

    original = dist.Work.wait

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        STASH.release(self)
        return original(self, *args, **kwargs)

    patches.set(dist.Work, "wait", wait)
    patches.on_restore(STASH.clear)


def run(
    sim: SimulationHost,
    func: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    values: Values,
) -> Any:
    """Run the c10d op `func` (its Meta kernel, through the fake mode below) with the
    buffers NCCL would allocate alive around it; answer its outputs and a completed Work
    that keeps its tensors until `wait()`."""
    STASH.release_unheld()
    scratch = None
    if func is _c10d.allgather_.default:
        scratch = _flat_like(sim, list(args[0][0])) if args[0] else None
    elif func is _c10d.reduce_scatter_.default:
        scratch = _flat_like(sim, list(args[1][0])) if args[1] else None
    elif func is _c10d.barrier.default:
        scratch = _barrier_tensor(sim)
    if func is _c10d.alltoall_base_.default:
        values.c10d_all_to_all(args)
    else:  # what it writes into (its first argument) no longer holds known values
        values.forget_written(tree_flatten(args[0] if args else [])[0])
    out = func(*args, **kwargs)
    held = []
    if _called_from_python_api():  # C++ callers (DDP's broadcast) wait in C++ at once
        held = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        held += [] if scratch is None else [scratch]
    if isinstance(out, tuple) and len(out) == 2:
        return out[0], STASH.keep(out[0], held)
    # ops answering a Work alone: the future holds their tensors (the first argument)
    return STASH.keep(args[0] if args and isinstance(args[0], list) else [], held)

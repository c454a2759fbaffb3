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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost

_c10d = torch.ops.c10d


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


def _completed(value: Any) -> Any:
    """A Work (boxed for the dispatcher) whose future already holds `value`."""
    from torch._C._distributed_c10d import (  # type: ignore[attr-defined]
        _create_work_from_future,
    )

    future: torch.futures.Future[Any] = torch.futures.Future()
    future.set_result(value)
    return _create_work_from_future(future).boxed()


def run(sim: SimulationHost, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run the c10d op `func` (its Meta kernel, through the fake mode below) with the
    buffers NCCL would allocate alive around it; answer its outputs and a completed Work."""
    scratch = None
    if func is _c10d.allgather_.default:
        scratch = _flat_like(sim, list(args[0][0])) if args[0] else None
    elif func is _c10d.reduce_scatter_.default:
        scratch = _flat_like(sim, list(args[1][0])) if args[1] else None
    elif func is _c10d.barrier.default:
        scratch = _barrier_tensor(sim)
    out = func(*args, **kwargs)
    del scratch  # freed when the op completes (it completes at once here)
    if isinstance(out, tuple) and len(out) == 2:
        return out[0], _completed(out[0])
    # ops answering a Work alone: the future holds their tensors (the first argument)
    return _completed(args[0] if args and isinstance(args[0], list) else [])

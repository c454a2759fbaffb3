"""Higher-order operators (HOPs) reaching the simulation's dispatch mode.

A HOP (`run_dtensor_rng_op`, `flex_attention`, `invoke_subgraph`, the `wrap_with_*`
and checkpoint wrappers Dynamo emits) takes functions or graphs besides tensors; a
dispatch mode sees it only when it says it supports them, and must then run it. What a
GPU allocates for one is what its body allocates, so the body runs with the tracker
active and every op inside is counted as usual:

- `run_dtensor_rng_op(start, end, op, *args)`: DTensor's random ops (`init.normal_` on a
  sharded parameter) run `op` between two moves of the CUDA generator's offset; the
  offsets do not matter here (values are fake), `op` is run.
- a HOP with a dense (CompositeExplicitAutograd) implementation runs it: `flex_attention`
  in eager mode is PyTorch's math implementation (the full score matrix, as on a GPU,
  which is why PyTorch warns to compile it), `invoke_subgraph` runs its subgraph, the
  `wrap_with_*` ones their function under the mode they set.
- any other HOP gets FakeTensorMode's rule (its outputs only), which are counted; so
  does `flex_attention` (and its backward) inside a compiled graph, where Inductor runs
  its own fused kernel, not the dense implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch._C import DispatchKey
from torch._ops import HigherOrderOperator

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost


class Tracking(Protocol):
    """The tracker (tracker.py, which imports this module) as this module uses it: a
    dispatch mode to enter again, and its simulation."""

    sim: SimulationHost

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...


# HOPs Inductor lowers to a Triton template: in a compiled graph their kernel writes its
# outputs (which the graph runner allocates) and nothing else, so the dense
# implementation, with its score matrix and its GEMMs' cuBLAS workspace, must not run
TEMPLATES = frozenset(["flex_attention", "flex_attention_backward"])


def is_higher_order(func: Any) -> bool:
    return isinstance(func, HigherOrderOperator)


def run(tracker: Tracking, func: HigherOrderOperator, args: Any, kwargs: dict[str, Any]) -> Any:
    """Run `func` as a GPU would, its allocations counted (the tracker is popped here)."""
    if func.name() == "run_dtensor_rng_op":
        op, op_args = args[2], args[3:]
        with tracker:
            return op(*op_args, **kwargs)
    dense = func.py_kernels.get(DispatchKey.CompositeExplicitAutograd)
    # A template HOP never runs its dense math inside a compiled graph, nor while
    # AOTAutograd traces one (its FunctionalTensors, not the simulation's fakes): there
    # its own functionalization and fake rules run, as on a GPU. The dense math made its
    # index tensors on the FunctionalTensor's C++ device, `cpu` here (see fake_cuda), and
    # a mask_mod reading a CUDA buffer mixed devices (modded-nanogpt's document mask):
    # the whole graph ran eagerly, with a score matrix per layer.
    compiled = tracker.sim.in_compiled_graph or not tracker.sim.holds(args[0])
    if dense is not None and not (compiled and func.name() in TEMPLATES):
        with tracker, torch._C._AutoDispatchBelowAutograd():
            return dense(*args, **kwargs)
    out = func(*args, **kwargs)
    tracker.sim._track_outputs(out)
    return out

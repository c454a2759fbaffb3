"""Which reductions of a compiled graph Inductor splits in two kernels, and how.

What Inductor does (torch 2.13's torch/_inductor/ir.py `Reduction.create`,
`Reduction.num_splits`, `create_multilayer_helper`; choices.py
`reduction_split_factor`): a reduction with few outputs and long rows, on which one
kernel would leave most of the GPU idle, becomes two. The first kernel reduces each
output's row in `split` blocks into a buffer of outputs x split (the workspace, realized:
allocated before that kernel like any buffer, freed after the second kernel, its last
reader); the second reduces each output's `split` partial results. The workspace's dtype
is the output's, but float32 for float16/bfloat16 outputs; a Welford reduction (var,
std, var_mean) keeps three (mean, m2, weight). The hint Inductor gives the reduction
(INNER where most full-size reads are contiguous along the reduced dimensions, OUTER
otherwise, DEFAULT for rows of 32 elements or less, or when there are at least
64 x SMs outputs) picks the split factor; argmax/argmin never split; the second kernel
of an OUTER split with few outputs is OUTER_TINY.

Not modelled: a first kernel that Inductor would split again (it recurses; taken as one
kernel here), `create_multilayer_existing_ranges` (a whole
reduction of another reduction's output), dynamic shapes, cooperative reductions
(`triton.cooperative_reductions`, off by default), `max.dim`/`min.dim` (a value and an
index reduction: taken as not split), and mix-order reductions (`triton.
mix_order_reduction`: a row reduction fused with a column one, for at least 4096 rows).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch.fx import Node

from memlens.simulation.patches.inductor_plan import REDUCTIONS, Plan, op_kind, op_name

if TYPE_CHECKING:
    from memlens.simulation.gpus import Gpu

MIN_ELEMENTS_PER_THREAD = 32  # num_splits' min_elements_per_thread
NEVER_SPLIT = frozenset(["argmax", "argmin"])  # arg reductions
WELFORD = frozenset(["var", "var_mean", "std", "std_mean"])  # three intermediates


@dataclass(frozen=True)
class Reduction:
    """How Inductor lowers one reduction node: its hint and, where it splits, the split."""

    hint: str  # "DEFAULT", "INNER" or "OUTER" (ReductionHint's names)
    outputs: int  # elements of the result (Inductor's ranges)
    row: int  # elements reduced into each (its reduction ranges)
    split: int = 1  # blocks per row in the first kernel; 1: one kernel
    workspace: tuple[int, ...] = ()  # bytes of each intermediate buffer

    @property
    def block(self) -> int:
        """Elements of a row each first-stage block reduces (FloorDiv, rounded up)."""
        return -(-self.row // self.split)

    @property
    def second_hint(self) -> str:
        """`_multilayer_second_step_hint`: the second kernel's hint."""
        if self.hint == "OUTER" and (
            (self.split <= 512 and self.outputs <= 512)
            or (self.split <= 1024 and self.outputs <= 256)
        ):
            return "OUTER_TINY"
        return self.hint


def lower_all(plan: Plan, gpu: Gpu) -> dict[Node, Reduction]:
    """Each reduction kernel's reduction in the planned graph, lowered on this card."""
    out = {}
    for n in plan.realized:
        op = op_name(n)
        lowered = lower(plan, n, op, gpu) if op in REDUCTIONS else None
        if lowered is not None:
            out[n] = lowered
    return out


def lower(plan: Plan, r: Node, op: str, gpu: Gpu) -> Reduction | None:
    """The reduction node `r` (aten op `op`) of a graph planned as `plan`, as Inductor
    lowers it on this card; None where its sizes are not static."""
    out, source = _value(r), _value(r.args[0]) if r.args else None
    if out is None or source is None or out.numel() == 0:
        return None
    outputs = out.numel()
    row = source.numel() // outputs
    if op in ("max", "min") and getattr(r.target, "_overloadname", "") == "dim":
        op = "argmax"  # values and indices: taken as one unsplit reduction
    hint, split = _num_splits(plan, r, op, outputs, row, gpu)
    if split <= 1:
        return Reduction(hint, outputs, row)
    dtype = out.dtype if out.dtype not in (torch.float16, torch.bfloat16) else torch.float32
    size = outputs * split * dtype.itemsize
    return Reduction(hint, outputs, row, split, (size,) * (3 if op in WELFORD else 1))


def _num_splits(plan: Plan, r: Node, op: str, outputs: int, row: int, gpu: Gpu) -> tuple[str, int]:
    """ir.py `Reduction.num_splits` (hint, split) for static sizes."""
    from torch._inductor import config

    should_split = (
        config.split_reductions
        and not config.triton.cooperative_reductions
        and op not in NEVER_SPLIT
    )
    if outputs == 1:
        return "INNER", split_factor(gpu, row, outputs, True) if should_split else 1
    if row <= MIN_ELEMENTS_PER_THREAD or outputs >= gpu.multiprocessors * 2 * 32:
        return "DEFAULT", 1
    strides = _read_strides(plan, r)
    if not strides:
        return "DEFAULT", 1
    # a read is outer when no reduced dimension is contiguous (stride 1)
    inner = sum(1 for s in strides if not all(x == 0 or x > 1 for x in s))
    hint = "INNER" if inner > len(strides) - inner else "OUTER"
    return hint, split_factor(gpu, row, outputs, hint == "INNER") if should_split else 1


def _read_strides(plan: Plan, r: Node) -> list[tuple[int, ...]]:
    """For each buffer the reduction's kernel reads over the whole reduced input (a
    buffer, a graph input, a view of one; pointwise ops of the input's shape are fused
    and read what they read), its strides along the reduced dimensions; the reads that
    broadcast over the kept ones where no read is full-size (`get_read_indices`)."""
    source = r.args[0]
    shape = _shape(source)
    dims = r.args[1] if len(r.args) > 1 else r.kwargs.get("dim")
    if shape is None or not isinstance(source, Node):
        return []
    ndim = len(shape)
    listed = [dims] if isinstance(dims, int) else dims if isinstance(dims, (list, tuple)) else []
    reduced = {d % ndim for d in listed if isinstance(d, int)} or set(range(ndim))
    full: set[tuple[int, ...]] = set()
    broadcast: set[tuple[int, ...]] = set()
    for leaf in _leaves(plan, source, shape):
        strides = _strides_in(leaf, shape)
        if strides is None:
            continue
        present = [strides[i] != 0 for i in range(ndim) if shape[i] > 1]
        along = tuple(strides[i] for i in sorted(reduced) if shape[i] > 1)
        key = (*along, -1, *strides)  # one read per distinct index
        if all(present):
            full.add(key)
        elif any(along):
            broadcast.add(key)
    n = len([i for i in reduced if shape[i] > 1])
    return [k[:n] for k in sorted(full or broadcast)]


def _leaves(plan: Plan, source: Node, shape: tuple[int, ...]) -> list[Node]:
    """The values the reduction's kernel loads: walking back from its input through
    pointwise ops of the same shape, which Inductor inlines, to what they read."""
    out: list[Node] = []
    seen: set[Node] = set()
    stack = [source]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        inlined = (
            n.op == "call_function"
            and op_kind(n.target) == "pointwise"
            and _shape(n) == shape
            and n not in plan.realized
        )
        if not inlined:
            out.append(n)
            continue
        stack.extend(a for a in n.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor))
    return out


def _strides_in(n: Node, shape: tuple[int, ...]) -> list[int] | None:
    """`n`'s strides broadcast to `shape` (0 where broadcast), or None."""
    val = _value(n)
    if val is None:
        return None
    sizes, strides = tuple(val.shape), tuple(val.stride())
    pad = len(shape) - len(sizes)
    if pad < 0 or not all(isinstance(s, int) for s in strides):
        return None
    out = []
    for i, size in enumerate(shape):
        j = i - pad
        if j >= 0 and sizes[j] == size:
            out.append(int(strides[j]) if size > 1 else 0)
        elif j < 0 or sizes[j] == 1:
            out.append(0)
        else:
            return None
    return out


def split_factor(gpu: Gpu, row: int, outputs: int, inner: bool) -> int:
    """torch's own `InductorChoices.reduction_split_factor` on this card."""
    return _split_factor(gpu, row, outputs, inner)


@functools.cache
def _split_factor(gpu: Gpu, row: int, outputs: int, inner: bool) -> int:
    from unittest import mock

    from torch._inductor.choices import InductorChoices
    from torch._inductor.runtime.hints import DeviceProperties

    props = device_properties(gpu)
    # on an instance: a staticmethod in torch 2.13, a method in 2.14 (its inner-reduction
    # threshold became `self._inner_reduction_no_split_threshold`)
    with mock.patch.object(DeviceProperties, "create", lambda device: props):
        split = InductorChoices().reduction_split_factor(
            torch.device("cuda"), row, outputs, inner_reduction=inner
        )
    return int(split)


def device_properties(gpu: Gpu) -> Any:
    """Inductor's DeviceProperties of the card (runtime/hints.py), as torch reads them
    from the device."""
    from torch._inductor.runtime.hints import DeviceProperties

    major, minor = gpu.capability
    return DeviceProperties(
        type="cuda",
        index=0,
        multi_processor_count=gpu.multiprocessors,
        cc=major * 10 + minor,
        major=major,
        max_threads_per_multi_processor=gpu.max_threads_per_multiprocessor,
        warp_size=32,
    )


def _value(node: Any) -> torch.Tensor | None:
    if not isinstance(node, Node):
        return None
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)) and val:
        val = val[0]
    if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
        return None
    return val


def _shape(node: Any) -> tuple[int, ...] | None:
    val = _value(node)
    return None if val is None else tuple(int(d) for d in val.shape)

"""Which buffers an Inductor-compiled graph allocates, when it frees them, which it reuses.

A static plan over one AOTAutograd graph (forward, backward or inference), made from
Inductor's rules as PyTorch 2.x states them (torch/_inductor: graph.py `run_node`,
ir.py `StorageBox.should_realize_on_reuse`, codegen/wrapper.py `AllocateLine.plan`),
without its code generation:

- Realized (a buffer is allocated): outputs of extern kernels (GEMMs, convolutions,
  attention, every op Inductor has no lowering for or falls back on), of reductions and
  scatters, of `empty`; the graph's outputs (for a training forward: AOTAutograd's saved
  tensors); inputs of extern kernels; a pointwise value with several users when its
  inlined function reads more than `realize_reads_threshold` (4) buffers or has more than
  `realize_opcount_threshold` (30) ops; any pointwise value reading more than
  `realize_acc_reads_threshold` (8) buffers.
- Everything else (pointwise ops, views) is fused into the kernels that read it: no memory.
- A buffer is freed after the last kernel that reads it, directly or through fused ops.
- Buffer reuse: an allocation takes a freed buffer of the same dtype and size (LIFO pool)
  when the free was one kernel before, or when holding it meanwhile does not raise the
  graph's planned peak; a fused pointwise kernel writes in place into an input buffer of
  the same dtype and size whose last reader it is, when it reads that buffer at one index
  only, the index it writes (scheduler.py `decide_inplace_update`, `can_inplace`): the
  same linear index, so also through a contiguous reshape, not through a transpose, a
  broadcast or an offset view. In a backward graph, the inputs AOTAutograd donates
  (saved tensors only the backward holds) are such buffers too.

Not modelled: the scheduler's reordering (but for a kernel fused into the one it reads,
and the kernel-local results of fused reductions: inductor_schedule.py), layout padding. Triton autotuning's benchmark allocations:
triton_autotune.py.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import torch
from torch.fx import Graph, Node

# the thresholds of torch/_inductor/config.py
READS_THRESHOLD = 4
OPCOUNT_THRESHOLD = 30
ACC_READS_THRESHOLD = 8

# realized output, inputs may be fused (reductions, scans, sorts, scatters, empty)
_REDUCING = frozenset(
    [
        "sum",
        "prod",
        "amax",
        "amin",
        "max",
        "min",
        "argmax",
        "argmin",
        "mean",
        "var",
        "var_mean",
        "std",
        "any",
        "all",
        "logsumexp",
        "cumsum",
        "cumprod",
        "logcumsumexp",
        "sort",
        "topk",
        "index_put",
        "scatter",
        "scatter_add",
        "scatter_reduce",
        "index_add",
        "index_copy",
        "index_reduce",
        "cat",
        "empty",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "empty_like",
    ]
)

# reductions Inductor lowers to Triton reduction kernels (aten names)
REDUCTIONS = frozenset(
    ["sum", "prod", "amax", "amin", "max", "min", "argmax", "argmin", "mean", "var"]
    + ["var_mean", "std", "any", "all", "logsumexp"]
)


def op_name(node: Node) -> str:
    """The aten op a call node runs ("sum"), "" for anything else."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return str(target._schema.name.split("::")[-1])
    return ""


# extern kernels whose lowering is a template or a call (their inputs are realized)
_EXTERN = frozenset(["mm", "bmm", "addmm", "baddbmm", "addbmm", "_int_mm", "convolution"])


@cache
def op_kind(target: Any) -> str:
    """'view', 'pointwise' (fusible), 'reduction' (realized output) or 'extern'."""
    if target is operator.getitem:
        return "getitem"
    if not isinstance(target, torch._ops.OpOverload):
        return "extern"
    if target.is_view:
        return "view"
    name = target._schema.name.split("::")[-1]
    if name in _EXTERN or target._schema.is_mutable:
        return "extern"
    if name in _REDUCING and not (name in ("max", "min") and target._overloadname == "other"):
        return "reduction"
    from torch._inductor import lowering  # imports Inductor (seconds): only when compiling

    if (
        target in lowering.needs_realized_inputs
        or target in lowering.fallbacks
        or target not in lowering.lowerings
    ):
        return "extern"
    return "pointwise"


def _mutates(node: Node) -> bool:
    """An aten op writing into its first argument. Higher-order operators (flex_attention,
    invoke_subgraph, wrap_with_*) have no schema: Inductor lowers them to kernels (a
    template, or the subgraph's own) that write fresh outputs, so they are extern calls
    whose tensor outputs, read through getitem, get buffers."""
    target = node.target
    return (
        node.op == "call_function"
        and isinstance(target, torch._ops.OpOverload)
        and target._schema.is_mutable
    )


def _tensor_inputs(node: Node) -> list[Node]:
    out: list[Node] = []
    for arg in node.all_input_nodes:
        val = arg.meta.get("val")
        # tuples: a kernel's several outputs, read through getitem
        if isinstance(val, (torch.Tensor, tuple, list)) or (
            arg.op == "placeholder" and not _scalar(arg)
        ):
            out.append(arg)
    return out


def _storage_nbytes(node: Node) -> int | torch.SymInt:
    """The bytes of `node`'s buffer, symbolic for a data-dependent size (a mixture of
    experts' token counts, unbacked symbols under `capture_scalar_outputs`)."""
    val = node.meta.get("val")
    return val.untyped_storage().nbytes() if isinstance(val, torch.Tensor) else 0


def _storage_bytes(node: Node) -> Any:
    """The bytes of `node`'s buffer: an int, or for a symbolic size the expression, which
    no int can be taken from while the graph is traced."""
    nbytes = _storage_nbytes(node)
    return nbytes.node.expr if isinstance(nbytes, torch.SymInt) else int(nbytes)


def _stored_into(node: Node, arg: Node) -> bool:
    """`arg` is the pointwise value an input mutation (`copy_(input, value)` at the end of
    the graph) writes back, read by nothing else: Inductor computes it straight into the
    input's buffer (no buffer of its own)."""
    return (
        node.target is torch.ops.aten.copy_.default
        and len(node.args) > 1
        and arg is node.args[1]
        and isinstance(node.args[0], Node)
        and node.args[0].op == "placeholder"
        and arg.op == "call_function"
        and op_kind(arg.target) == "pointwise"
        and len(arg.users) == 1
    )


def _scalar(node: Node) -> bool:
    """A node whose value is a host scalar, not a buffer: `.item()` of a tensor in the graph
    (a mixture of experts' token counts under `capture_scalar_outputs`) and the checks on
    it (`ge`, read by `_assert_scalar`). No buffer holds it; it lives to its last reader."""
    val = node.meta.get("val")
    return isinstance(val, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool))


def _nbytes(node: Node) -> int:
    """The bytes of `node`'s buffer for the estimate of the graph's planned peak: a
    symbolic size counts as its hint where it has one, else 0."""
    nbytes = _storage_nbytes(node)
    if isinstance(nbytes, torch.SymInt):
        hint = nbytes.node.hint
        return int(hint) if hint is not None else 0
    return int(nbytes)


def _shape(node: Node) -> tuple[int, ...] | None:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in val.shape):
        return None
    return tuple(val.shape)


# how a kernel iterating over some shape addresses a buffer: (size, stride) for each
# dimension of size above 1 (stride 0 where broadcast), and the storage offset; None
# where it cannot be told (symbolic sizes, an index composed through fused views)
Access = tuple[tuple[tuple[int, int], ...], int] | None


def _access(node: Node, shape: tuple[int, ...] | None) -> Access:
    """The access of `node`'s value broadcast to `shape` (torch's right-aligned rule)."""
    val = node.meta.get("val")
    if shape is None or not isinstance(val, torch.Tensor):
        return None
    sizes, strides = tuple(val.shape), tuple(val.stride())
    if not all(isinstance(x, int) for x in (*sizes, *strides, val.storage_offset())):
        return None
    pad = len(shape) - len(sizes)
    if pad < 0:
        return None
    dims = []
    for i, size in enumerate(shape):
        if size == 1:
            continue
        j = i - pad
        if j >= 0 and sizes[j] == size:
            dims.append((size, strides[j]))
        elif j < 0 or sizes[j] == 1:
            dims.append((size, 0))
        else:
            return None
    return _coalesced(dims), int(val.storage_offset())


def _same_linear_index(view: Node, base: Node) -> bool:
    """`view` is `base` reshaped: element i of one is element i of the other."""
    v, b = view.meta.get("val"), base.meta.get("val")
    return (
        isinstance(v, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and all(isinstance(x, int) for x in (*v.shape, *b.shape))  # no symbolic sizes
        and v.numel() == b.numel()
        and v.storage_offset() == b.storage_offset() == 0
        and v.is_contiguous()
        and b.is_contiguous()
    )


def _coalesced(dims: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """(size, stride) dims with each dim merged into the one outside it where together
    they step through memory as one (outer stride = inner size x inner stride): the
    linear index Inductor compares, so a contiguous reshape (the logits' `view(-1, V)`)
    reads at the index its kernel writes."""
    out: list[tuple[int, int]] = []
    for size, stride in reversed(dims):  # innermost first
        if out and stride == out[-1][0] * out[-1][1]:
            inner_size, inner_stride = out.pop()
            out.append((size * inner_size, inner_stride))
        else:
            out.append((size, stride))
    return tuple(reversed(out))


def _key(node: Node) -> tuple[Any, Any]:
    # Inductor reuses a freed buffer of the same dtype and a size it can prove equal
    # (the same expression, for symbolic sizes)
    val = node.meta.get("val")
    return (getattr(val, "dtype", None), _storage_bytes(node))


def unfuse_bias_adds(graph: Graph) -> None:
    """Inductor's post-grad `unfuse_bias_add_to_pointwise` (fx_passes/post_grad.py): on
    a GPU, an `addmm` whose every use is pointwise (through views) becomes `mm` plus an
    add that fuses into those uses (a bf16/fp16 bias stays fused where torch's config
    says so). Memory is the same; the GEMM then takes cuBLAS's path, not cuBLASLt's
    (no cuBLASLt workspace, see cublas_lt.py)."""
    from torch._inductor import config
    from torch._inductor.utils import is_pointwise_use

    keep_half = getattr(config, "keep_addmm_fused_for_half_dtypes", False)
    for n in list(graph.nodes):
        if n.target is not torch.ops.aten.addmm.default or n.kwargs:
            continue
        bias, mat1, mat2 = n.args
        val = bias.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.device.type != "cuda":
            continue
        if keep_half and val.dtype in (torch.float16, torch.bfloat16):
            continue
        if not n.users or not all(is_pointwise_use(use) for use in n.users):
            continue
        with graph.inserting_before(n):
            mm = graph.call_function(torch.ops.aten.mm.default, (mat1, mat2))
            add = graph.call_function(torch.ops.aten.add.Tensor, (mm, bias))
        for new in (mm, add):
            new.meta = dict(n.meta)
        n.replace_all_uses_with(add)
        graph.erase_node(n)


@dataclass
class Plan:
    """What the runner does at each node of the graph (nodes in graph order)."""

    owner: dict[Node, Node]  # tensor-valued node -> the node whose buffer holds it
    realized: list[Node]  # buffer owners that are allocated, in order
    # node -> owners (buffers, graph inputs) whose last reader it is
    release: dict[Node, list[Node]]
    reuse: dict[Node, Node] = field(default_factory=dict)  # new owner -> owner it takes over
    # realized node -> for each buffer its kernel reads, the accesses it reads it with
    access: dict[Node, dict[Node, frozenset[Access]]] = field(default_factory=dict)
    outputs: set[Node] = field(default_factory=set)  # owners that outlive the graph
    fused: int = 0  # pointwise values that got no buffer
    # pointwise kernels writing in place into the buffer they take over (`reuse`): an
    # in_out_ptr, a mutated argument of the Triton kernel (cloned when it is autotuned)
    inplace: set[Node] = field(default_factory=set)


def plan(graph: Graph, donated: frozenset[Node] = frozenset()) -> Plan:
    """The plan of `graph`; `donated`: the backward graph's inputs AOTAutograd donates
    (saved tensors nothing else holds), whose buffers a kernel may write in place."""
    nodes = list(graph.nodes)
    kinds = {n: (op_kind(n.target) if n.op == "call_function" else n.op) for n in nodes}
    owner: dict[Node, Node] = {}
    for n in nodes:
        kind = kinds[n]
        inputs = _tensor_inputs(n)
        if _scalar(n):
            owner[n] = n  # a host scalar: no buffer to share
        elif kind == "view" and inputs:
            owner[n] = owner.get(inputs[0], inputs[0])
        elif kind == "extern" and _mutates(n):
            # an in-place op writes into its first argument's buffer
            owner[n] = owner.get(inputs[0], inputs[0]) if inputs else n
        else:
            owner[n] = n
    realized: set[Node] = set()
    output_node = nodes[-1]
    outputs = {owner[a] for a in output_node.all_input_nodes if a in owner}
    for n in nodes:
        if kinds[n] in ("extern", "reduction", "getitem") and owner[n] is n and not _scalar(n):
            realized.add(n)
        if kinds[n] == "extern":
            realized.update(owner[a] for a in _tensor_inputs(n) if not _stored_into(n, a))
    realized.update(o for o in outputs if kinds[o] != "placeholder")
    # fusion decisions in graph order: what a pointwise value reads through fused ops
    reads: dict[Node, frozenset[Node]] = {}
    opcount: dict[Node, int] = {}
    accesses: dict[Node, dict[Node, frozenset[Access]]] = {}
    kernel_access: dict[Node, dict[Node, frozenset[Access]]] = {}
    for n in nodes:
        if n.op == "placeholder":
            reads[n], opcount[n] = frozenset([n]), 0
            continue
        if n.op != "call_function":
            continue
        got: set[Node] = set()
        ops = 1
        access: dict[Node, set[Access]] = {}
        shape = _shape(n)
        for a in _tensor_inputs(n):
            base = owner[a]
            if base in realized or kinds.get(base) == "placeholder":
                got.add(base)
                access.setdefault(base, set()).add(_access(a, shape))
            else:
                got |= reads.get(base, frozenset())
                ops += opcount.get(base, 0)
                # a fused value read elementwise keeps its reads' indices, also through
                # a contiguous reshape (the same linear index); through another view (or
                # a broadcast) the composed index is not modelled
                same = (
                    shape is not None
                    and _shape(a) == shape
                    and (a is base or _same_linear_index(a, base))
                )
                for buf, seen in accesses.get(base, {}).items():
                    access.setdefault(buf, set()).update(seen if same else {None})
        reads[n], opcount[n] = frozenset(got), ops
        accesses[n] = {buf: frozenset(seen) for buf, seen in access.items()}
        if kinds[n] == "pointwise" and owner[n] is n and n not in realized:
            many = len(n.users) > 1 and (len(got) > READS_THRESHOLD or ops > OPCOUNT_THRESHOLD)
            if many or len(got) > ACC_READS_THRESHOLD:
                realized.add(n)
        if n in realized:
            kernel_access[n] = accesses[n]
            reads[n], opcount[n], accesses[n] = frozenset([n]), 0, {}
    # a realized node's kernel reads what its fused inputs read; buffers die after it
    last: dict[Node, Node] = {}
    for n in nodes:
        # an in-place extern kernel (the `copy_` of an input mutation, which AOTAutograd
        # keeps in the graph: a mixture of experts' token counter) and a host scalar read
        # from a buffer (`.item()`) have no buffer of their own but read their arguments'
        writes = kinds[n] == "extern" and _mutates(n)
        if n not in realized and n is not output_node and not writes and not _scalar(n):
            continue
        for a in _tensor_inputs(n):
            base = owner[a]
            sources = [base] if base in realized else list(reads.get(base, ()))
            for s in sources:
                last[s] = n
    order = [n for n in nodes if n in realized]
    for n in order:  # realized but never read (an unused reduction output): dies at once
        last.setdefault(n, n)
    release: dict[Node, list[Node]] = {}
    for buf, at in last.items():
        if (buf in realized or kinds.get(buf) == "placeholder") and buf not in outputs:
            release.setdefault(at, []).append(buf)
    out = Plan(owner, order, release, outputs=outputs, access=kernel_access)
    out.fused = sum(1 for n in nodes if kinds[n] == "pointwise" and n not in realized)
    _plan_reuse(out, kinds, donated)
    return out


def _plan_reuse(p: Plan, kinds: dict[Node, str], donated: frozenset[Node]) -> None:
    """Inductor's memory planning (codegen/wrapper.py): in-place updates and the pool."""
    steps = {n: i for i, n in enumerate(p.realized)}
    freed_at = {b: steps[at] for at, bufs in p.release.items() if at in steps for b in bufs}
    # live bytes after each step's allocation, before its frees (no reuse yet)
    live = [0] * (len(p.realized) + 1)
    for b in p.realized:
        end = freed_at.get(b, len(p.realized))
        for i in range(steps[b], end + 1):
            live[i] += _nbytes(b)
    peak = max(live, default=0)
    pool: dict[tuple[Any, Any], list[tuple[int, Node]]] = {}
    claimed: set[Node] = set()
    for i, n in enumerate(p.realized):
        taken = _take(p, n, i, kinds, claimed, pool, live, peak, donated)
        if taken is not None:
            p.reuse[n] = taken
            claimed.add(taken)
        for b in p.release.get(n, []):
            if b not in claimed and kinds[b] != "placeholder":
                pool.setdefault(_key(b), []).append((i, b))


def _take(
    p: Plan,
    n: Node,
    i: int,
    kinds: dict[Node, str],
    claimed: set[Node],
    pool: dict[tuple[Any, Any], list[tuple[int, Node]]],
    live: list[int],
    peak: int,
    donated: frozenset[Node],
) -> Node | None:
    """The freed buffer that step `i` (node `n`) takes over, if any. In place, a donated
    graph input too (scheduler.py `decide_inplace_update` with its donated buffers: the
    backward's first kernel writes the logits' gradient over the saved logits)."""
    key = _key(n)
    size = _nbytes(n)  # the key's bytes as a number (a symbolic size: its estimate)
    if kinds[n] == "getitem" or key[1] == 0:
        return None  # several outputs of one kernel: allocated together, never reused
    if kinds[n] == "pointwise":
        # in place: an input buffer whose last reader is this very kernel, read at the
        # index the kernel writes
        writes = frozenset([_access(n, _shape(n))])
        reads = p.access.get(n, {})
        for b in p.release.get(n, []):
            if (
                b is not n
                and b not in claimed
                and (kinds[b] != "placeholder" or b in donated)
                and _key(b) == key
                and None not in writes
                and reads.get(b) == writes
            ):
                if b not in donated:  # (a graph input's bytes are not in `live`)
                    live[i] -= size  # one block where there were two
                p.inplace.add(n)
                return b
    if pool.get(key):
        freed, old = pool[key][-1]
        if freed + 1 == i or max(live[freed + 1 : i], default=0) + size <= peak:
            pool[key].pop()
            for j in range(freed + 1, i):
                live[j] += size  # the block is held until it is taken over
            return old
    return None

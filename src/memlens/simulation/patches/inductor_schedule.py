"""Where Inductor's scheduler runs a compiled graph's Triton kernels: the graph's order,
but for a kernel fused into an earlier one (scheduler.py `fuse_nodes`: a fused node
takes the place of its first member, `min_order`).

The fusion modelled is the vertical one that moves memory: a realized pointwise or
reduction node whose kernel reads a realized pointwise node's buffer whole (the same
number of elements) and nothing produced after that node joins its kernel; e.g. a bias
gradient's `sum` joins the activation gradient's kernel that a GEMM reads after it. Its
buffer is then allocated with the first node's, before their kernel, and the buffers it
read die after their last reader in that order, freed in the order that reader reads
them (Inductor's `del` lines). Other fusions put no buffer elsewhere: not modelled.

A reduction Inductor splits in two (inductor_split.py) joins no kernel: its first kernel
reads its input through the split's index, which matches no producer's write
(`can_fuse_vertical` wants the same index). First kernels of split reductions next to
each other, of the same sizes and reading a buffer in common, run as one (horizontal
fusion, as a layer norm's weight and bias gradients): their workspaces are allocated
together before it, and the buffers they last read die after it, before the second
kernels.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch
from torch.fx import Node

from memlens.simulation.patches.inductor_plan import REDUCTIONS, Plan, op_kind, op_name
from memlens.simulation.patches.inductor_split import Reduction

__all__ = ["REDUCTIONS", "SCATTERS", "Schedule", "iteration", "op_name", "schedule", "value"]

# lowered to a scatter kernel (pointwise heuristics) into its target's buffer
SCATTERS = frozenset(["index_put"])


@dataclass
class Schedule:
    order: list[Node]  # the graph's nodes in the order they run
    kernels: dict[Node, list[Node]]  # the node a Triton kernel launches after -> its nodes
    release: dict[Node, list[Node]]  # `plan.release` in that order
    # split reductions: the last of those whose first kernels are one -> them all (the
    # first kernel runs when the last one's value is there)
    first_stages: dict[Node, list[Node]] = field(default_factory=dict)
    # that last one -> buffers dying after the first kernel (the reductions' releases,
    # taken out of `release`)
    after_first: dict[Node, list[Node]] = field(default_factory=dict)
    # buffers only their own kernel reads: not allocated
    local: set[Node] = field(default_factory=set)


def value(node: Node) -> torch.Tensor | None:
    """A node's CUDA tensor of static sizes (the first of several outputs), or None."""
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)) and val:
        val = val[0]
    if not isinstance(val, torch.Tensor) or val.device.type != "cuda":
        return None
    if not all(isinstance(d, int) for d in val.shape):
        return None  # symbolic sizes: not modelled
    return val


def _numel(node: Node) -> int | None:
    val = value(node)
    return None if val is None else val.numel()


def iteration(node: Node) -> int | None:
    """The elements a kernel computing `node` iterates over: its output's for a
    pointwise node, its input's for a reduction."""
    if op_name(node) in REDUCTIONS:
        source = node.args[0] if node.args else None
        val = value(source) if isinstance(source, Node) else None
    else:
        val = value(node)
    return None if val is None else val.numel()


def schedule(
    plan: Plan, nodes: list[Node], lowered: dict[Node, Reduction] | None = None
) -> Schedule:
    """The order `nodes` run in and their kernels, the reductions lowered as `lowered`
    says (inductor_split.lower_all). Drops from `plan.reuse` what this order makes
    impossible (a buffer still read when its taker runs)."""
    lowered = lowered or {}
    splits = {n: r for n, r in lowered.items() if r.split > 1}
    position = {n: i for i, n in enumerate(nodes)}
    kinds = {n: op_kind(n.target) for n in plan.realized if n.op == "call_function"}

    def is_kernel(n: Node) -> bool:
        if kinds.get(n) == "pointwise" and plan.owner.get(n) is n:
            return value(n) is not None and iteration(n) != 0
        kernel_op = op_name(n) in REDUCTIONS or op_name(n) in SCATTERS
        return kinds.get(n) == "reduction" and kernel_op and value(n) is not None

    first: dict[Node, Node] = {}  # kernel node (or its output) -> its kernel's first node
    groups: dict[Node, list[Node]] = {}  # first node -> the kernel's nodes
    previous: Node | None = None  # the realized node before
    for n in plan.realized:
        before, previous = previous, n
        source = n.args[0] if kinds.get(n) == "getitem" and n.args else None
        if isinstance(source, Node) and source in first:
            first[n] = first[source]  # one of a kernel's several outputs
            continue
        if not is_kernel(n):
            continue
        head = first.get(before) if before is not None else None
        if head is not None and _siblings(plan, lowered, groups[head], n):
            first[n] = head  # one kernel for both reductions
            groups[head].append(n)
            continue
        first[n] = n
        groups[n] = [n]
        reads = [b for b in plan.access.get(n, {}) if b is not n]
        if not reads or not isinstance(n.meta.get("val"), torch.Tensor) or n in splits:
            continue  # reads nothing, has several outputs, or is split
        latest = max(reads, key=position.__getitem__)
        head = first.get(latest)
        if head is None:
            continue
        producer = groups[head][-1] if kinds.get(latest) == "getitem" else latest
        # the kernel's whole loop (its first node's: a reduction's input), the producer's,
        # or the output it reads
        loops = {iteration(head), iteration(producer), _numel(latest)}
        if (
            iteration(n) in loops
            and not (op_name(n) in REDUCTIONS and op_name(producer) in REDUCTIONS)
            and all(position[b] <= position[head] or first.get(b) is head for b in reads)
        ):  # all it reads is there when the first node's kernel runs
            first[n] = head
            groups[head].append(groups.pop(n)[0])
    order = _order(nodes, groups)
    kernels = {group[-1]: group for group in groups.values()}
    names = _names(plan)
    readers = _readers(plan)
    out = Schedule(order, kernels, _release(plan, order, groups, names, readers))
    out.local = _kernel_local(plan, groups, readers)
    _fuse_first_stages(plan, out, splits, names)
    _keep_possible_reuse(plan, out, groups)
    return out


def _siblings(plan: Plan, lowered: dict[Node, Reduction], group: list[Node], n: Node) -> bool:
    """Whether reduction `n` runs in the kernel of the reductions `group` just before
    it (horizontal fusion): the same sizes and hint, not split, a buffer read in common,
    none of theirs read (e.g. a layer norm backward's two row sums)."""
    r = lowered.get(n)
    if r is None or r.split > 1:
        return False
    other = lowered.get(group[0])
    if other is None or (other.outputs, other.row, other.hint, other.split) != (
        r.outputs,
        r.row,
        r.hint,
        1,
    ):
        return False
    reads = set(plan.access.get(n, {}))
    theirs = {b for m in group for b in plan.access.get(m, {})}
    return bool(reads & theirs) and not reads & set(group)


def _readers(plan: Plan) -> dict[Node, set[Node]]:
    """Each buffer (or graph input) -> the realized nodes whose kernels read it."""
    readers: dict[Node, set[Node]] = {}
    for r, reads in plan.access.items():
        for b in reads:
            readers.setdefault(b, set()).add(r)
    return readers


def _kernel_local(
    plan: Plan, groups: dict[Node, list[Node]], readers: dict[Node, set[Node]]
) -> set[Node]:
    """Reductions whose results only their own kernel reads, in its epilogue (Inductor's
    `remove_kernel_local_buffers`; a layer norm backward's row sums): kept in registers,
    never allocated. A pointwise buffer read only by the reductions fused with it is
    kept (not checked against a GPU)."""
    local = set()
    for group in groups.values():
        members = set(group)
        for m in group[:-1]:
            if op_name(m) not in REDUCTIONS or m in plan.outputs:
                continue
            if readers.get(m) and readers[m] <= members:
                local.add(m)
        for m in group:
            # a reduction with several results (var_mean: a layer norm's variance and
            # mean): each result only its own kernel reads is kept in registers too, and
            # the reduction allocates nothing when all of them are
            results = [g for g in m.users if g.target is operator.getitem]
            if op_name(m) not in REDUCTIONS or not results:
                continue
            for g in results:
                if g not in plan.outputs and readers.get(g) and readers[g] <= members:
                    local.add(g)
            if all(g in local for g in results):
                local.add(m)
    return local


def _keep_possible_reuse(plan: Plan, s: Schedule, groups: dict[Node, list[Node]]) -> None:
    """Inductor decides reuse in its kernels' order: a node takes over a buffer that died
    before it, or in place one its own kernel reads last; the reuse the graph's order
    planned that this order breaks is dropped."""
    at = {n: i for i, n in enumerate(s.order)}
    launch = {m: group[-1] for group in groups.values() for m in group}
    dies: dict[Node, float] = {}
    for node, bufs in s.release.items():
        for b in bufs:
            dies[b] = at[node]
    for head, bufs in s.after_first.items():
        for b in bufs:
            dies[b] = at[head] - 0.5  # before the reduction's own buffer
    for n, b in list(plan.reuse.items()):
        end = dies.get(b)
        inplace = end == at.get(launch.get(n, n))
        if b in s.local or end is None or not (end < at[n] or inplace):
            del plan.reuse[n]
            plan.inplace.discard(n)


def _fuse_first_stages(
    plan: Plan, s: Schedule, splits: dict[Node, Reduction], names: dict[Node, str]
) -> None:
    """Each split reduction's first kernel, fused with the next ones in the order (no
    other buffer between) of the same sizes that read a buffer in common."""
    realized = set(plan.realized)
    run: list[Node] = []

    def close() -> None:
        if run:
            s.first_stages[run[-1]] = list(run)
            dying = [b for m in run for b in s.release.pop(m, [])]
            s.after_first[run[-1]] = sorted(dying, key=names.__getitem__)
            run.clear()

    for n in s.order:
        if n not in realized:
            continue
        r = splits.get(n)
        if r is None:
            close()
            continue
        if run:
            head = splits[run[0]]
            shared = set(plan.access.get(n, {})) & {b for m in run for b in plan.access.get(m, {})}
            same = (r.outputs * r.split, r.block, r.hint) == (
                head.outputs * head.split,
                head.block,
                head.hint,
            )
            if not (same and shared):
                close()
        run.append(n)
    close()


def _order(nodes: list[Node], groups: dict[Node, list[Node]]) -> list[Node]:
    """The graph's order with each fused node (and the unrealized values it needs, not
    yet computed: views, fused pointwise ops) moved right after its kernel's first."""
    done: set[Node] = set()
    order: list[Node] = []

    def visit(root: Node) -> None:  # depth first, inputs before users, without recursion
        stack = [(root, False)]
        while stack:
            n, inputs_done = stack.pop()
            if inputs_done:
                order.append(n)
            elif n not in done:
                done.add(n)
                stack.append((n, True))
                stack.extend((a, False) for a in reversed(n.all_input_nodes) if a not in done)

    for n in nodes:
        visit(n)
        for m in groups.get(n, [])[1:]:
            visit(m)
    return order


def _release(
    plan: Plan,
    order: list[Node],
    groups: dict[Node, list[Node]],
    names: dict[Node, str],
    readers: dict[Node, set[Node]],
) -> dict[Node, list[Node]]:
    at = {n: i for i, n in enumerate(order)}
    launch = {m: group[-1] for group in groups.values() for m in group}
    out: dict[Node, list[Node]] = {}
    for node, bufs in plan.release.items():
        for buf in bufs:
            # the buffer's last reader in this order, not the graph's: a fused kernel's
            # nodes move, and so do the values they pull along (a layer norm's
            # `getitem(var_mean, 0)` after `getitem(var_mean, 1)` when the kernel that
            # reads both is the reduction's own)
            last = max([node, *readers.get(buf, ())], key=at.__getitem__)
            out.setdefault(launch.get(last, last), []).append(buf)
    for bufs in out.values():  # each kernel's in the order of their names
        bufs.sort(key=names.__getitem__)
    return out


def _names(plan: Plan) -> dict[Node, str]:
    """The names Inductor's code gives the graph's buffers: a graph input its own, a
    buffer `buf<N>` numbered in the graph's order (Inductor's numbers also count split
    workspaces and kernel-local buffers: where those shift one past a power of ten, the
    order may differ). Its scheduler frees the buffers a kernel read last in the order of
    their names (`Scheduler.free_buffers`: sorted, so buf10 before buf9)."""
    names: dict[Node, str] = {}
    count = 0
    for n in plan.realized:
        if n.op == "placeholder":
            continue
        names[n] = f"buf{count}"
        count += 1
    for n in plan.owner.values():
        names.setdefault(n, n.name if n.op == "placeholder" else f"buf{count}")
    return names

"""`torch.compile` in a simulation: Dynamo and AOTAutograd as on a GPU, Inductor's buffers
modelled without its code generation (Triton is absent from CPU builds).

- Dynamo traces the code on the fake CUDA tensors (the Tracker says it may: its
  `ignore_compile_internals`), so graph breaks and guards are PyTorch's own.
- AOTAutograd builds the joint graph with Inductor's decompositions and splits it with
  Inductor's partitioner (its joint-graph passes, then the min-cut recomputation): the
  forward graph's extra outputs are exactly the tensors a GPU run saves for backward.
- Each forward / backward / inference graph then runs node by node on the fakes with
  allocation tracking paused; `inductor_plan.plan` says which nodes get a buffer (the
  rest are fused into kernels), when each buffer is freed and which freed buffer a new
  one takes over, and the runner makes exactly those allocator calls. Graph inputs are
  dropped at their last use (Inductor's boxed calling convention), so a compiled
  backward frees saved activations as it goes. A buffer's stack is the user code the
  node came from (its FX `stack_trace`) above the caller's frames, as PyTorch records
  allocations from Inductor's generated code.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import re
import traceback
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg
from torch.utils._pytree import tree_flatten

from memlens.simulation.patches import (
    cudagraph_trees,
    fake_cuda,
    inductor_schedule,
    inductor_split,
    sdpa,
    triton_autotune,
)
from memlens.simulation.patches.inductor_plan import Plan, plan, unfuse_bias_adds
from memlens.simulation.patches.tracker import Tracker

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost

NOTE = (
    "torch.compile: Dynamo's graphs partitioned by AOTAutograd with Inductor's "
    "decompositions and min-cut recomputation (the tensors a GPU saves for backward); "
    "Inductor's kernels modelled, not generated: pointwise ops fused (no buffer), buffers "
    "freed after their last kernel and reused as its memory planner does"
)


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def install(patches: fake_cuda.Patches, sim: SimulationHost) -> None:
    """Make `torch.compile` (and `nn.Module.compile`, which calls it) use the model."""
    original: Callable[..., Any] = torch.compile
    # Dynamo skips every frame while a non-infrastructure dispatch mode is active.
    patches.set(Tracker, "ignore_compile_internals", classmethod(lambda cls: True))
    patches.set(GraphModule, "__deepcopy__", _deepcopy_graph(GraphModule.__deepcopy__))
    reset: list[bool] = []
    tree = cudagraph_trees.install(patches)(sim)  # one per simulation, as per thread on a GPU

    def compile_(model: Any = None, **kwargs: Any) -> Any:
        if model is None:  # @torch.compile(...) as a decorator factory
            return lambda fn: compile_(fn, **kwargs)
        if kwargs.get("disable"):
            return model
        backend = kwargs.pop("backend", None) or "inductor"
        mode = kwargs.pop("mode", None)
        options = kwargs.pop("options", None) or {}
        if backend == "inductor":
            graphs = mode in ("reduce-overhead", "max-autotune") or options.get("triton.cudagraphs")
            backend = InductorModel(sim, tree if graphs else None)
        else:
            sim.note(f"torch.compile(backend={backend!r}) ran that backend on the fakes")
        if not reset:
            # compiled code is cached per code object: none of it may outlive the fakes
            reset.append(True)
            patches.on_restore(_reset_dynamo)
            _hide_autocast_patches(patches)
            # The simulation's SDPA (sdpa.py) is a Python function in place of torch's:
            # Dynamo would inline it and break the graph at its backend choice (a C
            # function it cannot trace), splitting each attention layer's graph in two
            # where a GPU has one. In the graph, as torch's own is, AOTAutograd traces
            # it, and the kernel it picks is the graph's node.
            torch._dynamo.allow_in_graph(torch.nn.functional.scaled_dot_product_attention)
            _skip_bookkeeping()
            _ddp_frames_without_modes(patches)
        return original(model, backend=backend, **kwargs)

    compile_.__wrapped__ = original  # type: ignore[attr-defined]
    patches.set(torch, "compile", compile_)


# The simulation's bookkeeping, Python that runs inside the program: the tracker's
# dispatch (under compiled code's eager parts too, e.g. Dynamo making a changing float
# argument a tensor), a storage's free callback (fired by whichever line drops the last
# reference, compiled code's included: DDP's forward rebuilding its buckets), the stacks
# it records and the allocator model under both. Dynamo takes each for user code to
# compile: it broke the "graph" at sys._getframe, or made a graph of the one autograd-node
# query (an extra graph torch.compile(DDP(model)) does not have on a GPU).
_BOOKKEEPING = (
    "memlens.simulation.session",
    "memlens.simulation.request_log",
    "memlens.simulation.patches.tracker",
    "memlens.simulation.patches.frames",
    "memlens.analysis.allocator_model",
)


@functools.cache  # once per process: each call appends to Dynamo's skip list
def _skip_bookkeeping() -> None:
    from torch._dynamo import trace_rules

    for module in _BOOKKEEPING:
        trace_rules.add(module)


def _ddp_frames_without_modes(patches: fake_cuda.Patches) -> None:
    """Dynamo converts a frame with the dispatch modes off (convert_frame.py:
    `_disable_current_modes()` around its backend), except a frame it hands to DDP's
    graph splitter (`_clone_with_backend(ddp_optimizer.compile_fn)`), which it calls
    before that block; on a GPU no mode is on. Here the simulation's are, so making a
    fake of a view argument (a micro-batch from `inputs.split(n)`) replayed the view
    through them and gave the simulation's fake, not Dynamo's: "`tensor` needs to be a
    FakeTensor wrapped by this instance of Dynamo" (modded-nanogpt's 2025-01-04 record).
    That callback now runs with the modes off too."""
    from torch._dynamo import convert_frame
    from torch.utils._python_dispatch import _disable_current_modes

    def modes_off(callback: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            with _disable_current_modes():
                return callback(*args, **kwargs)

        return call

    def cloned(getter: Callable[[Any], Callable[[Any], Any]]) -> property:
        def clone_with_backend(self: Any) -> Callable[[Any], Any]:
            return lambda backend: modes_off(getter(self)(backend))

        return property(clone_with_backend)

    for cls in (convert_frame.ConvertFrame, convert_frame.ConvertFrameAssert):
        clone = vars(cls).get("_clone_with_backend")
        if not isinstance(clone, property) or clone.fget is None:
            continue  # another torch: left as it is
        patches.set(cls, "_clone_with_backend", cloned(clone.fget))


def _hide_autocast_patches(patches: fake_cuda.Patches) -> None:
    # The simulation's autocast __enter__/__exit__ (fake_cuda) are Python functions that
    # Dynamo would inline and fail on; run them outside the graph (a graph break at each
    # `with torch.autocast(...)` inside compiled code, e.g. Hugging Face's rotary embedding)
    cls = torch.amp.autocast_mode.autocast
    for name in ("__enter__", "__exit__"):
        patches.set(cls, name, torch._dynamo.disable(getattr(cls, name)))


def _reset_dynamo() -> None:
    # with torch.cuda patched as available, reset() would import CUDA-graph trees, which
    # need CUDA bindings a CPU build lacks
    from unittest import mock

    with mock.patch.object(torch.cuda, "is_available", lambda: False):
        torch._dynamo.reset()


class InductorModel:
    """A Dynamo backend: AOTAutograd as Inductor drives it, graphs run by GraphRunner."""

    def __init__(self, sim: SimulationHost, tree: cudagraph_trees.Tree | None = None):
        self.sim = sim
        self.tree = tree  # CUDA graph trees (mode="reduce-overhead"), or none

    def __deepcopy__(self, memo: dict[int, Any]) -> InductorModel:
        # one backend per simulation, never copied: wrappers of torch.compile that keep a
        # deep copy of its arguments (Lightning's `_compile_kwargs`) would otherwise try to
        # copy the whole simulation with it
        return self

    def __call__(self, gm: GraphModule, example_inputs: list[Any]) -> Any:
        from torch._dynamo.backends.common import aot_autograd
        from torch._dynamo.exc import RestartAnalysis
        from torch._guards import detect_fake_mode
        from torch._inductor.compile_fx import partition_fn
        from torch._inductor.decomposition import select_decomp_table
        from torch._inductor.virtualized import V

        self.sim.note(NOTE)

        def compiler(mode: str) -> Callable[[GraphModule, list[Any]], Any]:
            def compile_graph(g: GraphModule, inputs: list[Any]) -> Any:
                # Triton's autotuning keeps its clones' memory low in a backward or an
                # inference graph (`optimize_mem`), not in a training forward
                optimize_mem = mode != cudagraph_trees.FORWARD
                if self.tree is None:
                    return GraphRunner(self.sim, g, optimize_mem, _donated(mode))
                runner = GraphRunner(self.sim, g, optimize_mem)
                self.sim.note(cudagraph_trees.NOTE)
                return cudagraph_trees.TreeFunction(self.tree, runner, mode, _static(mode, g))

            return compile_graph

        backend = aot_autograd(
            fw_compiler=compiler(cudagraph_trees.FORWARD),
            bw_compiler=compiler(cudagraph_trees.BACKWARD),
            inference_compiler=compiler(cudagraph_trees.INFERENCE),
            partition_fn=partition_fn,
            decompositions=select_decomp_table(),
            keep_inference_input_mutations=True,
        )
        from torch._inductor import config

        # Constant folding would run real kernels on the (fake) device: its results only
        # replace constants, which hold no activation memory. pad_mm decides by
        # benchmarking padded GEMMs on the device: where Triton is installed (a CUDA build
        # of torch, 2.14.1's) it would launch real kernels; without Triton (the CPU build)
        # it never pads, and the simulation keeps to that.
        patched = config.patch(joint_graph_constant_folding=False, shape_padding=False)
        # Inductor's passes read the graph's fake mode from its virtualized `V` (the
        # random-number pass that turns dropout into Inductor's seeded kernels needs it),
        # which compile_fx sets around AOTAutograd as here
        fake_mode = detect_fake_mode(example_inputs) or FakeTensorMode(allow_non_fake_inputs=True)
        with _backward_devices(), patched, _no_constant_propagation(), V.set_fake_mode(fake_mode):
            try:
                return backend(gm, example_inputs)
            except RestartAnalysis:
                # Dynamo's control flow, not a failure: it traces the frame again
                # (TensorifyScalarRestartAnalysis: a changing float argument the graph
                # cannot take as a tensor, traced again specialised)
                raise
            except Exception as exc:  # a graph the model cannot take: run it as traced
                if os.environ.get("MEMLENS_DEBUG_COMPILE"):
                    traceback.print_exc()  # why, for whoever is finding out
                self.sim.note(f"torch.compile: a graph ran eagerly ({type(exc).__name__})")
                return gm.forward


def _deepcopy_graph(original: Callable[..., Any]) -> Callable[..., Any]:
    """GraphModule.__deepcopy__ (AOTAutograd copies a backward graph, with its tensor
    constants, before compiling it lazily) that copies the graph's tensors first: fake
    ones by a fake clone (their device's copy, as on a GPU), host ones on the host with
    the fake mode off. Tensor's own __deepcopy__ clones the storage, which neither
    allows here (a fake storage would be made on the real device, a host one would
    become a meta tensor over a CPU storage)."""

    def deepcopy(self: GraphModule, memo: dict[int, Any]) -> Any:
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        for module in self.modules():
            for value in list(vars(module).values()) + list(module._buffers.values()):
                if isinstance(value, torch.Tensor) and id(value) not in memo:
                    memo[id(value)] = _copy(value, unset_fake_temporarily)
        with unset_fake_temporarily():
            return original(self, memo)

    return deepcopy


def _copy(t: torch.Tensor, unset: Callable[[], Any]) -> torch.Tensor:
    if isinstance(t, FakeTensor):
        copy = t.detach().clone()
    else:
        with unset():
            copy = t.detach().clone()
    if isinstance(t, torch.nn.Parameter):
        return torch.nn.Parameter(copy, requires_grad=t.requires_grad)
    return copy.requires_grad_(t.requires_grad) if t.is_leaf else copy


@contextlib.contextmanager
def _no_constant_propagation() -> Iterator[None]:
    """make_fx (AOTAutograd's tracer) computes one-element constants for real beside the
    graph: `torch.tensor(0, device="cuda")` in a Dynamo graph (an int index turned into a
    tensor, as `idx[0][q]` in a flex_attention mask function: context parallel's block
    mask) is copied to the device with the fake mode off, which needs a real GPU here.
    Those constants only answer `.item()` during tracing; without them the graph is the
    same. A failed trace also left its vmap levels on functorch's stack, and Dynamo's
    guard check then failed ("Guard failed on the same frame it was created")."""
    from torch.fx.experimental import proxy_tensor

    limit = proxy_tensor.CONSTANT_NUMEL_LIMIT
    proxy_tensor.CONSTANT_NUMEL_LIMIT = 0
    try:
        yield
    finally:
        proxy_tensor.CONSTANT_NUMEL_LIMIT = limit


@contextlib.contextmanager
def _requests_kept(sim: SimulationHost, requests: list[bool]) -> Iterator[None]:
    """A GEMM's workspace requests, kept for after its output buffer: Inductor's code
    allocates the buffer (`empty_strided_cuda`) before the extern kernel that makes the
    workspace (`extern_kernels.mm(..., out=buf)`), so on a GPU the buffer comes first."""
    shadowed = sim.__dict__.get("_ensure_workspace")  # a replay's (cudagraph_trees)
    setattr(sim, "_ensure_workspace", lambda lt=False: requests.append(lt))  # noqa: B010
    try:
        yield
    finally:
        if shadowed is None:
            delattr(sim, "_ensure_workspace")
        else:
            setattr(sim, "_ensure_workspace", shadowed)  # noqa: B010


def _static(mode: str, g: GraphModule) -> set[int]:
    """The graph's inputs a CUDA graph tree does not copy (compile_fx's static_input_idxs):
    a forward's parameters and buffers, every input of a backward but its tangents."""
    if mode == cudagraph_trees.BACKWARD:
        from torch._inductor.utils import count_tangents

        return set(range(count_tangents(g)))
    context = torch._guards.TracingContext.try_get()
    if context is None or context.fw_metadata is None:
        return set()
    return set(context.fw_metadata.static_input_indices)


@contextlib.contextmanager
def _backward_devices() -> Iterator[None]:
    """While AOTAutograd traces the joint graph: backward formulas build tensors from a
    CUDA tensor's options(), whose C++ device reads `cpu` here (see fake_cuda); on a GPU
    they are CUDA tensors (the Tracker does the same for eager backward), on the rank's
    device (`cuda:LOCAL_RANK` once the script called `set_device`): cuda:0 on another
    rank's graph is a device mismatch, and the graph ran eagerly there."""
    original = FakeTensorMode.__torch_dispatch__

    def dispatch(
        self: FakeTensorMode, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if "device" in kwargs and torch._C._current_autograd_node() is not None:
            device = kwargs["device"]
            if device is None or torch.device(device).type == "cpu":
                kwargs = {**kwargs, "device": fake_cuda.current_cuda()}
        return original(self, func, types, args, kwargs)

    FakeTensorMode.__torch_dispatch__ = dispatch  # type: ignore[method-assign]
    try:
        yield
    finally:
        FakeTensorMode.__torch_dispatch__ = original  # type: ignore[method-assign]


def _devices_as_traced(gm: GraphModule) -> None:
    """Device arguments recorded as `cpu` whose traced value is a CUDA tensor get the
    value's device. A backward formula traced by AOTAutograd took its device from a fake
    CUDA tensor's options(), which reads `cpu` here (see fake_cuda); `_backward_devices`
    moved the fake value to CUDA, but the FX node keeps what the formula asked for. On a
    GPU both say cuda. Two shapes of it:
    - a factory's `device=` (`index_backward`'s zeros): running it as recorded would
      scatter CUDA gradients into a host tensor;
    - `prims.device_put(x, cpu)` from Inductor's `_to_copy` decomposition, in the
      backward of a dtype cast (`_to_copy_backward`: `grad.to(self.options())`, e.g.
      the bf16 logits' `.float()` before a compiled cross-entropy): the gradient would
      leave the graph as a host tensor. On a GPU the target is the tensor's own device,
      so the decomposition emits no `device_put` at all: the node is dropped."""
    for n in list(gm.graph.nodes):
        value = n.meta.get("val")
        if not (isinstance(value, torch.Tensor) and value.device.type == "cuda"):
            continue
        if n.target is _DEVICE_PUT and _is_cpu(n.args[1]):
            source = n.args[0]
            traced = source.meta.get("val") if isinstance(source, Node) else None
            if isinstance(traced, torch.Tensor) and traced.device == value.device:
                n.replace_all_uses_with(source)
                gm.graph.erase_node(n)
            else:
                n.update_arg(1, value.device)
        elif _is_cpu(n.kwargs.get("device")):
            n.update_kwarg("device", value.device)


_DEVICE_PUT = torch.ops.prims.device_put.default


def _is_cpu(device: Any) -> bool:
    return device is not None and torch.device(device).type == "cpu"


def _donated(mode: str) -> frozenset[int]:
    """The positions of the backward graph's inputs AOTAutograd donates (saved tensors
    only the backward holds: functorch's `donated_buffer`), as Inductor reads them."""
    if mode != cudagraph_trees.BACKWARD:
        return frozenset()
    from torch._inductor.utils import get_donated_idxs

    return frozenset(get_donated_idxs() or ())


class GraphRunner:
    """One compiled graph: runs its nodes on the fakes, allocating as `plan` says."""

    def __init__(
        self,
        sim: SimulationHost,
        gm: GraphModule,
        optimize_mem: bool = False,
        donated: frozenset[int] = frozenset(),
    ):
        # AOTAutograd hands over its argument list, so inputs die at their last use; an
        # instance attribute, which the wrappers AOTAutograd puts around it copy
        self._boxed_call = True
        self.sim = sim
        self.gm = gm
        _devices_as_traced(gm)
        unfuse_bias_adds(gm.graph)
        self.nodes = list(gm.graph.nodes)
        inputs = [n for n in self.nodes if n.op == "placeholder"]
        self.donated = frozenset(inputs[i] for i in donated if i < len(inputs))
        self.plan: Plan = plan(gm.graph, self.donated)
        # how Inductor lowers each reduction: split in two kernels or not
        lowered = inductor_split.lower_all(self.plan, sim.gpu)
        self.splits = {n: r for n, r in lowered.items() if r.split > 1}
        # where the Triton kernels run, fused ones included, and which autotune
        self.schedule = inductor_schedule.schedule(self.plan, self.nodes, lowered)
        self.kernels = {
            at: triton_autotune.describe(self.plan, group, lowered)
            for at, group in self.schedule.kernels.items()
        }
        self.first_stages = {
            at: triton_autotune.first_stage(group, lowered)
            for at, group in self.schedule.first_stages.items()
        }
        self._workspaces: dict[Node, list[int]] = {}  # split reduction -> addresses
        # split reductions whose buffers wait for the first kernel they share
        self._waiting = {m for run in self.schedule.first_stages.values() for m in run[:-1]}
        self.optimize_mem = optimize_mem
        realized = set(self.plan.realized)
        held_by_owner = realized | {n for n in self.nodes if n.op == "placeholder"}
        # values dropped when their buffer is released, or after their last user in the
        # order the nodes run: a fused kernel's nodes run earlier than the graph has them,
        # so the graph's last user of a value may run before another of its users
        self.members: dict[Node, list[Node]] = {}
        self.drop_after: dict[Node, list[Node]] = {}
        position = {n: i for i, n in enumerate(self.schedule.order)}
        for n in self.nodes:
            base = self.plan.owner.get(n, n)
            if base in held_by_owner:
                self.members.setdefault(base, []).append(n)
            elif n.users:
                last = max(n.users, key=position.__getitem__)
                self.drop_after.setdefault(last, []).append(n)
        self.realized = realized
        # a kernel with several outputs -> its getitem nodes by output index
        self.getitems: dict[Node, dict[int, Node]] = {}
        for n in self.nodes:
            if n.target is operator.getitem and isinstance(n.args[1], int):
                source = n.args[0]
                if isinstance(source, Node) and source in realized:
                    self.getitems.setdefault(source, {})[n.args[1]] = n
        self._frames: dict[Node, list[dict[str, Any]]] = {}

    def __call__(self, args: list[Any], allocate: bool = True) -> Any:
        # the runner holds each input only through `env`, so an input dies at its last
        # use as in Inductor's generated code (`args.clear()`, then `del` after the last
        # kernel reading it): a list of them all would keep every one to the end
        inputs = list(reversed(args))
        args.clear()
        env: dict[Node, Any] = {}
        blocks: dict[Node, int] = {}  # buffer owner -> its storage's key in sim._live
        held: dict[Node, int] = {}  # released buffers waiting to be taken over: address
        try:
            for n in self.schedule.order:
                if n.op == "placeholder":
                    env[n] = self._on_device(n, inputs.pop())
                    if n in self.donated:
                        self._donate(n, env[n], blocks)
                elif n.op == "get_attr":
                    env[n] = getattr(self.gm, str(n.target))
                elif n.op == "output":
                    return map_arg(n.args[0], env.__getitem__)
                else:
                    self._run(n, env, blocks, held, allocate)
            raise AssertionError("graph without an output node")
        finally:
            for address in held.values():  # planned for a reuse that did not come
                self.sim.allocator.free(address, self.sim.frames.collect())
            env.clear()

    def _donate(self, n: Node, value: Any, blocks: dict[Node, int]) -> None:
        """A donated input a kernel takes over in place: its block is the graph's to
        hand on (`_address`), no longer its storage's to free."""
        if n in self.plan.reuse.values() and self.sim.holds(value):
            key = value.untyped_storage()._cdata
            if key in self.sim._live:
                blocks[n] = key

    def _on_device(self, n: Node, value: Any) -> Any:
        """A gradient that eager autograd built as a CPU fake (its formula took the device
        of a fake CUDA tensor's options(), which reads `cpu`, see fake_cuda) reaching a
        graph traced on CUDA: on a GPU it is a CUDA tensor, so it becomes one here, and
        is counted from now on."""
        expected = n.meta.get("val")
        if (
            isinstance(value, FakeTensor)
            and isinstance(expected, torch.Tensor)
            and expected.device.type == "cuda"
            and value.fake_device.type == "cpu"
        ):
            value.fake_device = expected.device
            self.sim._track_outputs(value)
        return value

    def _run(
        self,
        n: Node,
        env: dict[Node, Any],
        blocks: dict[Node, int],
        held: dict[Node, int],
        allocate: bool = True,
    ) -> None:
        sim = self.sim
        fn_args = map_arg(n.args, env.__getitem__)
        fn_kwargs = map_arg(n.kwargs, env.__getitem__)
        workspaces: list[bool] = []  # cuBLAS workspace requests, after the buffer
        sim.in_compiled_graph = True
        try:
            with _requests_kept(sim, workspaces):
                value = n.target(*fn_args, **fn_kwargs)  # type: ignore[operator]
        finally:
            sim.in_compiled_graph = False
        # the arguments die now, not when this frame returns: a tuple drops its items last
        # first, and the buffers released below must die in Inductor's order
        del fn_args, fn_kwargs
        env[n] = value
        run = self.schedule.first_stages.get(n)
        if run is not None:  # the last of split reductions: their first kernel, before
            self._first_stage(run, env, blocks, held, allocate)
            for m in run[:-1]:
                self._launch(m, env[m], blocks, held, allocate)
        if n not in self._waiting:  # else: after the first kernel, with the last
            self._launch(n, value, blocks, held, allocate)
        for lt in workspaces:
            sim._ensure_workspace(lt=lt)
        self._release(self.schedule.release.get(n, ()), env, blocks, held)
        for m in self.drop_after.get(n, ()):
            env.pop(m, None)

    def _launch(
        self, n: Node, value: Any, blocks: dict[Node, int], held: dict[Node, int], allocate: bool
    ) -> None:
        """Node `n`'s buffer and its kernels' first launch (which may autotune)."""
        if n not in self.realized or not allocate:  # a CUDA graph's replay allocates nothing
            return
        if n not in self.schedule.local:  # a kernel-local buffer takes no memory
            self._allocate(n, value, blocks, held)
        for kernel in self.kernels.get(n, ()):
            triton_autotune.first_launch(self.sim, kernel, self.optimize_mem, self._stack(n))
        for address in self._workspaces.pop(n, ()):  # its second kernel read it
            self.sim.allocator.free(address, self._stack(n))

    def _first_stage(
        self,
        run: list[Node],
        env: dict[Node, Any],
        blocks: dict[Node, int],
        held: dict[Node, int],
        allocate: bool,
    ) -> None:
        """The first kernel of the split reductions `run`: their workspaces, its launch;
        then the buffers they last read die (inductor_split.py)."""
        last = run[-1]
        if allocate:
            sim, stack = self.sim, self._stack(run[0])
            for m in run:
                self._workspaces[m] = [sim._malloc(b, stack) for b in self.splits[m].workspace]
            kernel = self.first_stages[last]
            triton_autotune.first_launch(sim, kernel, self.optimize_mem, stack)
        self._release(self.schedule.after_first.get(last, ()), env, blocks, held)

    def _release(
        self, bufs: Any, env: dict[Node, Any], blocks: dict[Node, int], held: dict[Node, int]
    ) -> None:
        """Buffers whose last reader ran: dropped, or held for the node taking them over."""
        for buf in bufs:
            if buf in self.plan.reuse.values() and buf in blocks:
                # taken over later: keep its block, forget its (dying) storage
                held[buf] = self.sim._live.pop(blocks.pop(buf))
            for m in self.members.get(buf, ()):
                env.pop(m, None)

    def _allocate(
        self, n: Node, value: Any, blocks: dict[Node, int], held: dict[Node, int]
    ) -> None:
        sim = self.sim
        # a kernel with several outputs allocates them all, in order; each is the block
        # of the getitem node that reads it (unread ones die with the tuple)
        outputs = self.getitems.get(n)
        for i, item in enumerate(value if outputs is not None else [value]):
            owner = n if outputs is None else outputs.get(i)
            if owner in self.schedule.local:
                continue  # a result its kernel keeps in registers (inductor_schedule)
            for t in tree_flatten(item)[0]:
                if not sim.holds(t) or sdpa.on_host(t):
                    continue
                storage = t.untyped_storage()
                key = storage._cdata
                if key in sim._live or storage.nbytes() == 0:
                    continue  # an input's or an earlier buffer's storage
                sim._live[key] = self._address(n, storage.nbytes(), blocks, held)
                if owner is not None:
                    blocks.setdefault(owner, key)
                weakref.finalize(storage, sim._on_storage_freed, key)

    def _address(self, n: Node, nbytes: int, blocks: dict[Node, int], held: dict[Node, int]) -> int:
        """The block for node `n`'s buffer: the one it takes over, else a new one."""
        old = self.plan.reuse.get(n)
        if old is not None and old in held:
            return held.pop(old)
        if old is not None and old in blocks:  # in place: its input dies here
            return self.sim._live.pop(blocks.pop(old))
        return self.sim._malloc(nbytes, self._stack(n))

    def _stack(self, n: Node) -> list[dict[str, Any]]:
        frames = self._frames.get(n)
        if frames is None:
            found = _FRAME.findall(n.meta.get("stack_trace") or "")
            frames = [{"filename": f, "line": int(line), "name": name} for f, line, name in found]
            frames.reverse()  # a traceback lists the outermost frame first
            self._frames[n] = frames
        return frames + self.sim.frames.collect() if self.sim.frames.enabled else []

"""`torch.compile`'s CUDA graph trees (`mode="reduce-overhead"`, `"max-autotune"`,
`options={"triton.cudagraphs": True}`) in a simulation: a model of
torch/_inductor/cudagraph_trees.py's memory, over the simulation's CUDAGraph and pools
(cuda_graphs.py) and the compiled graphs' runner (torch_compile.GraphRunner).

Why a model and not PyTorch's own code: its replay rebuilds the outputs from raw device
pointers (`_construct_storage_from_data_pointer`), checks inputs by address
(`_tensors_data_ptrs_at_indices_equal`) and restores the allocator from checkpoints
(`_cuda_setCheckpointPoolState`), none of which exist for fake tensors.

What a GPU does, and this model with it (torch 2.11 recorded on an H200,
tests/data/gpu/graphs/reduce_overhead.pickle.gz):
- The tree's manager, at the first call of a graph: a stream of its own, a
  `graph_pool_handle()` pool (0, N) shared by every graph of the tree, and an empty
  capture into it that keeps the pool alive (the CUDA generator's graph-safe state, two
  8-byte blocks on that stream, comes with it).
- Warm-up (a graph's first call, and every call until a new generation starts): the
  graph runs as compiled, on the tree's stream, every allocation in the pool; cuBLAS's
  workspaces are dropped before and after (`clear_cublas_manager`), so the stream's
  workspace is made in the pool and freed again; Triton's autotuning at each kernel's
  first launch runs here, its L2-sized flush buffers in the pool (triton_autotune.py).
- Recording (the next call): inputs that are neither static (parameters, buffers; a
  backward's saved values) nor outputs of the tree are copied into the pool, then the
  graph is captured into the pool (`torch.cuda.graph`: empty_cache first), workspaces
  dropped around it. Its outputs are real blocks of the pool, freed when they die.
- Replay (later calls that find their recorded node): the captured kernels write the
  recorded addresses; nothing is allocated or freed, and outputs dying free nothing.
- Generations: a new one starts at each entry into compiled code (Dynamo's
  GenerationTracker) or `torch.compiler.cudagraph_mark_step_begin()`, unless a forward's
  backward is still pending; outputs of a warm-up or recording still alive then are
  freed under their tensors (`dealloc_current_path_weakrefs`).
Approximate: before a warm-up or recording that follows replays whose outputs are
still alive, PyTorch restores the pool from a checkpoint; here those outputs get fresh
blocks in the pool (the same bytes, not the same addresses). Assumed: replays always
match their recording (no re-recording for moved parameters or new shapes).
"""

from __future__ import annotations

import contextlib
import itertools
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from memlens.simulation.patches import cuda_stubs

if TYPE_CHECKING:
    from memlens.analysis.allocator_model import PoolId
    from memlens.simulation.host import SimulationHost
    from memlens.simulation.patches.fake_cuda import Patches

FORWARD, BACKWARD, INFERENCE = "forward", "backward", "inference"
NONE, WARMUP, RECORDING, EXECUTION = "none", "warm-up", "recording", "execution"
NOTE = (
    "torch.compile CUDA graph trees modelled: a warm-up call and a recording into the "
    "tree's private pool on its own stream, then replays that allocate nothing; replays "
    "are assumed to match their recording (no re-recording)"
)


def _storage_refs(outputs: Any, skip: set[int]) -> list[weakref.ref[Any]]:
    """Weak references to the storages of the CUDA tensors among `outputs`, leaving out
    the storages in `skip` (the call's inputs: an output aliasing an input is not the
    tree's)."""
    refs = []
    for t in outputs if isinstance(outputs, (list, tuple)) else (outputs,):
        if isinstance(t, FakeTensor) and t.fake_device.type == "cuda":
            storage = t.untyped_storage()
            if storage._cdata not in skip and storage.nbytes() > 0:
                refs.append(weakref.ref(storage))
    return refs


class _Node:
    """A call on the tree's current path: a warm-up, or a recorded graph (which later
    calls replay)."""

    def __init__(self, function: TreeFunction, parent: _Node | None):
        self.function = function
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.outputs: list[weakref.ref[Any]] = []  # this call's, the latest replay's
        self.graph: Any = None  # a recorded node keeps its graph (and the pool) alive

    def path(self) -> list[_Node]:
        """The nodes from the root to this one."""
        node: _Node | None = self
        out = []
        while node is not None:
            out.append(node)
            node = node.parent
        return out[::-1]

    def live_storages(self) -> Iterator[Any]:
        for node in self.path():
            for ref in node.outputs:
                storage = ref()
                if storage is not None:
                    yield storage


class TreeFunction:
    """One compiled graph under the tree (what cudagraphify wraps): a boxed callable."""

    def __init__(self, tree: Tree, runner: Any, mode: str, static: set[int]):
        self._boxed_call = True  # AOTAutograd hands over its argument list
        self.tree = tree
        self.runner = runner
        self.mode = mode
        self.static = static
        self.id = next(tree.ids)

    def __call__(self, args: list[Any]) -> Any:
        return self.tree.run(self, args)


class Tree:
    """CUDAGraphTreeManager's memory, for the simulation's one device and thread."""

    def __init__(self, sim: SimulationHost) -> None:
        self.sim = sim
        self.ids = itertools.count()
        self.stream: Any = None
        self.pool: Any = None
        self.graph: Any = None
        self.roots: dict[int, _Node] = {}
        self.warmed: set[int] = set()
        self.current: _Node | None = None
        self.state = NONE
        self.generation = -1
        self.pending_backward = False

    # ------------------------------------------------------------ the manager
    def _start(self) -> None:
        self.stream = torch.cuda.Stream()
        self.pool = torch.cuda.graph_pool_handle()
        self.graph = torch.cuda.CUDAGraph()  # an empty capture keeps the pool alive
        with torch.cuda.graph(self.graph, pool=self.pool, stream=self.stream):
            pass

    def run(self, fn: TreeFunction, args: list[Any]) -> Any:
        if self.graph is None:
            self._start()
        out = self._run(fn, args)
        if fn.mode == FORWARD:
            self.pending_backward = True
        elif fn.mode == BACKWARD:
            self.pending_backward = False
        return out

    def _run(self, fn: TreeFunction, args: list[Any]) -> Any:
        Manager = _torch_trees().CUDAGraphTreeManager  # noqa: N806 (torch's class)
        generation = Manager.get_curr_generation()
        new = generation != self.generation
        can_start = new and (Manager.user_invoked_mark_step() or not self.pending_backward)
        if self.state in (WARMUP, RECORDING):  # try_end_curr_warmup / _recording
            if can_start:  # a new generation: the path's live outputs are freed
                self._free_path_outputs()
                self._end_path()
            elif self._all_outputs_dead():
                self._end_path()
        if fn.id not in self.warmed or self.state == WARMUP:
            if self.state == EXECUTION:
                self._checkpoint()
            return self._warm_up(fn, args, generation)
        if self.state != RECORDING:
            children = self.roots if self.current is None else self.current.children
            child = children.get(fn.id)
            if child is not None:
                return self._replay(child, args, generation)
            if self.current is not None and fn.id in self.roots:
                self._try_end_execution(can_start)
                if self.current is None:  # a root again: it replays
                    return self._replay(self.roots[fn.id], args, generation)
            self._try_end_execution(can_start)
            if self.current is not None:
                self._checkpoint()
        return self._record(fn, args, generation)

    def _end_path(self) -> None:
        self.current, self.state = None, NONE

    def _all_outputs_dead(self) -> bool:
        return self.current is None or not any(True for _ in self.current.live_storages())

    def _try_end_execution(self, can_start: bool) -> None:
        if can_start or self._all_outputs_dead():
            self._end_path()

    # ------------------------------------------------------------ the three calls
    def _warm_up(self, fn: TreeFunction, args: list[Any], generation: int) -> Any:
        self.warmed.add(fn.id)
        node = _Node(fn, self.current)
        self.current, self.state, self.generation = node, WARMUP, generation
        inputs = _input_storages(args)
        with _cublas_cleared(), self._in_pool():
            out = fn.runner(args)
        node.outputs = _storage_refs(out, inputs())
        return out

    def _record(self, fn: TreeFunction, args: list[Any], generation: int) -> Any:
        node = _Node(fn, self.current)
        (self.roots if self.current is None else self.current.children)[fn.id] = node
        self.current, self.state, self.generation = node, RECORDING, generation
        tree_outputs = {s._cdata for s in node.parent.live_storages()} if node.parent else set()
        with self._in_pool():  # static_input: an empty_strided copy in the pool
            for i, t in enumerate(args):
                if (
                    isinstance(t, FakeTensor)
                    and t.fake_device.type == "cuda"
                    and i not in fn.static
                    and t.untyped_storage()._cdata not in tree_outputs
                ):
                    args[i] = torch.empty_strided(
                        t.size(), t.stride(), dtype=t.dtype, device=t.device
                    )
        inputs = _input_storages(args)
        graph = torch.cuda.CUDAGraph()
        with _cublas_cleared(), torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
            out = fn.runner(args)
        node.graph = graph
        node.outputs = _storage_refs(out, inputs())
        return out

    def _replay(self, node: _Node, args: list[Any], generation: int) -> Any:
        self.current, self.state, self.generation = node, EXECUTION, generation
        inputs = _input_storages(args)
        with _no_workspace(self.sim):
            out = node.function.runner(args, allocate=False)
        node.outputs = _storage_refs(out, inputs())
        for ref in node.outputs:
            _in_pool_without_block(self.sim, ref())
        return out

    # ------------------------------------------------------------ pool state
    @contextlib.contextmanager
    def _in_pool(self) -> Iterator[None]:
        """_use_cuda_memory_pool_manager: the tree's stream, its requests in the pool."""
        allocator = self.sim.allocator
        pool: PoolId = (int(self.pool[0]), int(self.pool[1]))
        with torch.cuda.stream(self.stream):
            allocator.begin_allocate_to_pool(pool, cuda_stubs.current_stream_id())
            try:
                yield
            finally:
                allocator.end_allocate_to_pool(pool)
                allocator.release_pool(pool)

    def _free_path_outputs(self) -> None:
        """A new generation: the memory of the path's outputs still alive is freed under
        them (torch._C._free_And_Remove_DeleterFn); their tensors free nothing later."""
        sim = self.sim
        assert self.current is not None
        for storage in list(self.current.live_storages()):
            address = sim._live.get(storage._cdata)
            if address is not None:
                _in_pool_without_block(sim, storage, address)
                sim.allocator.free(address, sim.frames.collect())

    def _checkpoint(self) -> None:
        """Replays' outputs still alive before a warm-up or recording: on a GPU the pool
        is restored to hold them (setCheckpointPoolState); here each gets a block of its
        size in the pool, freed when it dies."""
        assert self.current is not None
        sim = self.sim
        with self._in_pool():
            for storage in list(self.current.live_storages()):
                key = storage._cdata
                if sim._live.get(key, 0) is None:
                    sim._live[key] = sim._malloc(storage.nbytes())
                    weakref.finalize(storage, sim._on_storage_freed, key)


def _in_pool_without_block(sim: SimulationHost, storage: Any, address: int | None = None) -> None:
    """Mark a storage as memory of the tree's pool that the allocator holds no block for
    (a replay's output, or an output freed under its tensor): the simulation knows it
    (`sim._live`, so ops on it allocate nothing) with no block (None), and freeing it
    frees nothing. `address`: the block it had, freed by the caller."""
    if storage is None:
        return
    key = storage._cdata
    if key in sim._live and sim._live[key] != address:
        return  # an input's storage (a view of a parameter): the allocator's block
    live: dict[int, int | None] = sim._live  # type: ignore[assignment]
    live[key] = None
    weakref.finalize(storage, _forget, live, key)


def _forget(live: dict[int, int | None], key: int) -> None:
    if key in live and live[key] is None:
        del live[key]


def _input_storages(args: list[Any]) -> Callable[[], set[int]]:
    """The keys of the input storages still alive when called (an input freed during
    the call may leave its key to an output's storage)."""
    refs = [weakref.ref(t.untyped_storage()) for t in args if isinstance(t, torch.Tensor)]
    return lambda: {s._cdata for s in (r() for r in refs) if s is not None}


@contextlib.contextmanager
def _cublas_cleared() -> Iterator[None]:
    """clear_cublas_manager: cuBLAS's workspaces are dropped before and after."""
    torch._C._cuda_clearCublasWorkspaces()
    try:
        yield
    finally:
        torch._C._cuda_clearCublasWorkspaces()


@contextlib.contextmanager
def _no_workspace(sim: SimulationHost) -> Iterator[None]:
    """A replay launches the captured kernels: no GEMM makes a workspace."""
    setattr(sim, "_ensure_workspace", lambda lt=False: None)  # noqa: B010 (shadows the method)
    try:
        yield
    finally:
        delattr(sim, "_ensure_workspace")


_TORCH_TREES = "torch._inductor.cudagraph_trees"


def _torch_trees() -> Any:
    """torch._inductor.cudagraph_trees, imported as a CPU build imports it: with CUDA
    reported built (as in a simulation) it would import CUDA bindings the build lacks.
    Its generation counters are what this model reads."""
    import sys

    module = sys.modules.get(_TORCH_TREES)
    if module is None:
        with _as_cpu_build():
            import torch._inductor.cudagraph_trees as module
    return module


def _as_cpu_build() -> contextlib.AbstractContextManager[Any]:
    from unittest import mock

    return mock.patch.object(torch.backends.cuda, "is_built", lambda: False)


class _ImportAsCpuBuild:
    """A `sys.meta_path` finder for torch's cudagraph_trees alone: whoever imports it
    while a simulation runs (torch.compile, `torch.compiler.cudagraph_mark_step_begin`)
    gets it as `_torch_trees` makes it. Importing it costs about 2 s of CPU (it imports
    inductor's compile_fx), which a script that never compiles need not pay."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        import sys

        if name != _TORCH_TREES:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(name, path, target)
            if spec is not None and spec.loader is not None:

                def exec_module(module: Any, run: Any = spec.loader.exec_module) -> None:
                    with _as_cpu_build():
                        run(module)

                spec.loader.exec_module = exec_module  # this spec's own loader object
                return spec
        return None


def install(patches: Patches) -> Callable[[SimulationHost], Tree]:
    """Each simulation starts with `cudagraph_mark_step_begin`'s counter at zero (a
    module global in torch) and ends with it restored. Torch's module is imported only
    where the process has it already or the simulated code asks for it: a fresh import
    starts the counter at zero, and it is zero again after the simulation."""
    import sys

    module = sys.modules.get(_TORCH_TREES)
    if module is not None:
        patches.set(module.MarkStepBox, "mark_step_counter", 0)
        return Tree

    def zero_if_imported() -> None:
        imported = sys.modules.get(_TORCH_TREES)
        if imported is not None:
            imported.MarkStepBox.mark_step_counter = 0

    finder = _ImportAsCpuBuild()
    patches.on_restore(zero_if_imported)
    sys.meta_path.insert(0, finder)
    patches.on_restore(lambda: sys.meta_path.remove(finder))
    return Tree

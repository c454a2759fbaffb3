"""The dispatch mode that turns fake CUDA tensors' storages into allocator calls.

It sits above FakeTensorMode and sees every aten op: new CUDA storages among the outputs
go to the simulation (`_track_outputs`), random ops are made to work without a CUDA
generator, `.item()` answers zero, and the first GEMM of a thread reserves cuBLAS's
workspace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from memlens.simulation.distributed import collectives, process_group
from memlens.simulation.distributed.values import Values
from memlens.simulation.patches import (
    cublas_lt,
    cuda_kernels,
    dispatch_memo,
    fake_cuda,
    foreach_reduce,
    higher_order,
    index_put_kernel,
    logsumexp_kernel,
    reduce_kernel,
    sdpa,
)
from memlens.simulation.patches.inplace import BackwardInPlace

if TYPE_CHECKING:
    from memlens.simulation.host import SimulationHost

_SEEDED = torch.Tag.nondeterministic_seeded
_aten = torch.ops.aten
_LOCAL_SCALAR_DENSE = _aten._local_scalar_dense.default
# Ops that run a cuBLAS GEMM: the first one on a thread makes cuBLAS allocate its
# workspace through the caching allocator, which then stays until empty_cache.
_GEMM_OPS = {
    _aten.mm.default,
    _aten.bmm.default,
    _aten.addmm.default,
    _aten._addmm_activation.default,
    _aten.baddbmm.default,
    _aten.addbmm.default,
    _aten.addmv.default,
    _aten.mv.default,
    _aten._scaled_mm.default,  # cuBLASLt's scaled_gemm (cublas_lt.py)
}


_SCALAR_TENSOR = _aten.scalar_tensor.default
_FROM_FILE = _aten.from_file.default  # no fake kernel: read for real (values.py)


def scalar_on_asked_device(
    kwargs: dict[str, Any] | None, asked: torch.device
) -> dict[str, Any] | None:
    """`wrapped_scalar_tensor(s, self.device())` (the composite `where(cond, self, scalar)`
    and `where(cond, scalar, other)`, TensorCompare.cpp): C++ asks a tensor its device and
    at once makes the scalar there. On a GPU that is a 0-dim tensor on the device, taken
    from the caching allocator and freed when the composite returns; a fake CUDA tensor's
    C++ device reads `cpu` (fake_cuda), so the scalar is moved to the device asked about.
    Only a `scalar_tensor` that directly follows the question: C++ code in between would
    have asked again."""
    if kwargs is None or kwargs.get("device") != fake_cuda.CPU or asked.type != "cuda":
        return kwargs
    return {**kwargs, "device": asked}


_VIEW = _aten.view.default
_UNSAFE_VIEW = _aten._unsafe_view.default


def _view(*args: Any, **kwargs: Any) -> Any:
    """`aten._unsafe_view` (einsum's and matmul's reshapes of a GEMM's result) as the
    `view` it is below autograd, where this mode sits: the same shape, strides and
    storage, no allocation on a GPU either. FakeTensorMode never caches `_unsafe_view`
    (its "unsafe view" bypass) and works each one out with the reference reshape, about
    as long as a hundred cached ops; `view` is cached."""
    try:
        return _VIEW(*args, **kwargs)
    except (RuntimeError, ValueError):  # not viewable: _unsafe_view's own answer
        return _UNSAFE_VIEW(*args, **kwargs)


def _zero(dtype: torch.dtype) -> float | bool | int:
    if dtype.is_floating_point:
        return 0.0
    return False if dtype == torch.bool else 0


def is_cuda(t: Any) -> bool:
    return isinstance(t, FakeTensor) and t.fake_device.type == "cuda"


class _Op:
    """What the tracker needs to know of one operator, worked out at its first call: an
    OpOverload hashes in Python, so asking each table in turn cost more per op than the
    bookkeeping itself."""

    __slots__ = (
        "func", "run", "higher_order", "c10d", "model", "composite", "seeded", "kernel", "gemm",
        "memo", "keywords",
    )  # fmt: skip

    def __init__(self, func: Any, fast: dispatch_memo.DispatchMemo | None) -> None:
        self.func = func  # held: the table is keyed by id(func)
        self.run = _view if func is _UNSAFE_VIEW else func  # what computes its outputs
        # this op's calls -> FakeTensorMode's cache entries (dispatch_memo.py); None: the
        # op always goes through FakeTensorMode's own dispatch
        self.memo: dict[Any, Any] | None = (
            {} if fast is not None and self.run is func and fast.applies_to(func) else None
        )
        self.higher_order = higher_order.is_higher_order(func)
        if self.higher_order:
            self.c10d, self.model, self.composite, self.seeded = False, None, False, False
            self.kernel, self.gemm = None, False
            self.keywords: tuple[str, ...] = ()
            return
        self.c10d = func.namespace == "c10d"
        self.model = cuda_kernels.MODELS.get(func)
        # Under inference_mode (or with autograd off) a CompositeImplicitAutograd op such
        # as einsum reaches the dispatch modes whole; on a GPU it decomposes at the CUDA
        # key. An op with its own backend kernel (silu_backward) runs that kernel on a
        # GPU, not its composite: a CPU build registers no CUDA kernels, so a CPU kernel
        # stands for the CUDA one. (prim ops, prim::device, are not dispatcher operators.)
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        self.composite = (
            func.namespace == "aten"
            and has(func.name(), "CompositeImplicitAutograd")
            and not has(func.name(), "CPU")
        )
        self.seeded = _SEEDED in func.tags
        # a CUDA kernel that allocates buffers of its own (attention, reductions)
        self.kernel = (
            sdpa.KERNELS.get(func)
            or reduce_kernel.KERNELS.get(func)
            or index_put_kernel.KERNELS.get(func)
            or logsumexp_kernel.KERNELS.get(func)
            or foreach_reduce.KERNELS.get(func)
        )
        # the keyword-only arguments the kernel reads (aminmax's dim), after the positional
        self.keywords = reduce_kernel.KEYWORD_ONLY.get(func, ())
        self.gemm = func in _GEMM_OPS


class Tracker(TorchDispatchMode):
    # HOPs (DTensor's RNG, flex_attention, invoke_subgraph) come here: higher_order.py
    supports_higher_order_operators = True

    def __init__(self, sim: SimulationHost, fake_mode: FakeTensorMode | None = None):
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.sim = sim
        self._ops: dict[int, _Op] = {}  # id(func) -> what it is
        # FakeTensorMode's cache hits, answered without its key (dispatch_memo.py)
        self._fast = None if fake_mode is None else dispatch_memo.DispatchMemo(fake_mode)
        self._backward = BackwardInPlace()
        # the CUDA device C++ was just told reads `cpu` (prim.device), until the next op
        self._asked: torch.device | None = None
        # values for expert parallelism's routing counts (--routing): values.py
        self.values = Values(sim, sim.routing)
        self._fake_mode = fake_mode

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # False: torch leaves __torch_dispatch__ unwrapped, and it keeps Dynamo out itself
        return False

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        # Dynamo must not compile the frames of a dispatch (torch.compile in the simulated
        # code): what torch's `disable` wrapper around a mode's __torch_dispatch__ does, in
        # its two C calls without the wrapper's Python, which cost as much per op as this
        # mode's own bookkeeping
        prior = _set_eval_frame(None)
        try:
            return self._dispatch(func, types, args, kwargs)
        finally:
            _set_eval_frame(prior)

    def _dispatch(
        self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any] | None
    ) -> Any:
        device = fake_cuda.prim_device(func, args)
        if device is not None:
            # C++ asking a fake tensor its device: most of the calls that reach this mode,
            # answered before the rest of it. Inside a backward node it is still an op
            # of that node, as the in-place bookkeeping counts them (inplace.py).
            if not self.sim.in_compiled_graph:
                backward = torch._C._current_autograd_node()
                if backward is not None:
                    self._backward.enter(backward)
            self._asked = args[0].fake_device if device is fake_cuda.CPU else None
            return device
        asked, self._asked = self._asked, None
        if func is _SCALAR_TENSOR and asked is not None:
            kwargs = scalar_on_asked_device(kwargs, asked)
        kwargs = kwargs or {}
        op = self._ops.get(id(func))
        if op is None:
            op = self._ops[id(func)] = _Op(func, self._fast)
        if op.higher_order:
            return higher_order.run(self, func, args, kwargs)
        if process_group.any_dtensor_type(types):
            # a DTensor (FSDP2's parameters, tensor parallel): it runs the op on its local
            # tensors, which come back through this mode and are tracked there. `types`
            # holds the class of every tensor subclass among the arguments, nested ones too.
            return NotImplemented
        sim = self.sim
        # a compiled graph's ops (simulation/patches/torch_compile.py) are not eager autograd formulas
        node = None if sim.in_compiled_graph else torch._C._current_autograd_node()
        if node is not None:
            inplace = self._backward.replacement(node, func, args, kwargs)
            if inplace is not None:
                inplace(*args, **kwargs)  # no new output: the GPU's in-place path
                kernel = index_put_kernel.KERNELS.get(inplace)
                if kernel is not None and self._touches_cuda(args, kwargs):
                    kernel(sim, args, args[0])  # but its kernel's temporaries
                return args[0]
        if kwargs:
            device = kwargs.get("device")
            if device is not None and str(device) == "cuda":
                # a bare "cuda" means the current device (set_device: a rank's LOCAL_RANK);
                # by index, or FakeTensorMode's dispatch cache answers an earlier one's
                kwargs = {**kwargs, "device": fake_cuda.current_cuda()}
        if sim.cpu_options_mean_cuda and node is None and process_group.is_factory(func):
            return process_group.reducer_factory(sim, func, args, kwargs)
        if "device" in kwargs and node is not None and not fake_cuda.device_was_named():
            # Backward formulas build tensors from a CUDA tensor's options(), whose C++
            # device reads `cpu` here (see fake_cuda); on a GPU they land on the GPU. A
            # device named in Python (`.to("cpu")` in a backward hook: FSDP2's CPU
            # offload of each unit's gradients) is where the copy goes.
            device = kwargs["device"]
            if device is None or torch.device(device).type == "cpu":
                kwargs = {**kwargs, "device": fake_cuda.current_cuda()}
        if func is _LOCAL_SCALAR_DENSE:
            # `.item()` on a fake CUDA tensor (printing a loss), or on a CPU tensor made
            # inside the block (DataLoader's seed, a sampler's indices): there is no value,
            # so answer a zero of the right type rather than stop the run. CPU constants
            # the fake mode still knows keep their value; the routing counts have theirs
            # (distributed/values.py).
            known = self.values.scalar(args[0])
            if known is not None:
                return known
            if not self._touches_cuda(args, kwargs):
                try:
                    return func(*args, **kwargs)
                except DataDependentOutputException:
                    pass
            sim.note("tensor values are fake: .item() answered 0")
            return _zero(args[0].dtype)
        if op.c10d:
            return collectives.run(sim, func, args, kwargs, self.values)
        if func is collectives.WAIT_TENSOR:
            # the kernel waits and answers its argument; the fake mode would make a copy
            return args[0]
        if op.model is not None and self._touches_cuda(args, kwargs):
            # a kernel the CPU build lacks: what the CUDA kernel allocates
            out = op.model(sim, args, kwargs)
            if node is not None:
                self._backward.made(func, out)
            return out
        if op.composite:
            # decomposed here, through this mode again, so its GEMMs (cuBLAS workspace)
            # and internal temporaries are seen as on the GPU (see _Op)
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if func is _FROM_FILE:
            return self.values.read_file(func, args, kwargs)
        if self._fake_mode is not None:
            args, kwargs = self.values.lift(args, kwargs, self._fake_mode)
        if op.seeded and self._touches_cuda(args, kwargs):
            out = self._random(func, args, kwargs)
        else:
            try:
                if op.memo is not None and self._fast is not None:
                    out = dispatch_memo.run(op.memo, self._fast, func, args, kwargs)
                else:
                    out = op.run(*args, **kwargs)
            except DynamicOutputShapeException:
                # bincount, nonzero...: a size from values, known for the routing's
                out = self.values.sized_by_values(func, args, kwargs)
                if out is None:
                    raise
        if op.kernel is not None and self._touches_cuda(args, kwargs):
            given = (*args, *(kwargs.get(k) for k in op.keywords)) if op.keywords else args
            op.kernel(sim, given, out)  # the outputs and the kernel's own buffers, in order
        else:
            sim._track_outputs(out)
        self.values.after(func, args, kwargs, out)
        if node is not None:
            self._backward.made(func, out)
        if (
            op.gemm
            and self._touches_cuda(args, kwargs)
            and not cublas_lt.runs_cutlass(func, args, sim.gpu.capability)
        ):
            sim._ensure_workspace(lt=cublas_lt.uses_lt(func, args, kwargs))
        return out

    @staticmethod
    def _touches_cuda(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        device = kwargs.get("device")
        if device is not None and torch.device(device).type == "cuda":
            return True
        return any(is_cuda(a) for a in tree_flatten((args, kwargs))[0])

    @staticmethod
    def _random(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # A CPU-only build has no CUDA generator. Values do not matter, so in-place random
        # fills return their input and the rest run on CPU fakes and are re-made on CUDA.
        if func._schema.is_mutable and args and is_cuda(args[0]):
            return args[0]

        def to_cpu(x: Any) -> Any:
            if is_cuda(x):
                return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="cpu")
            return x

        # the device asked for, by index: FakeTensorMode's dispatch cache would answer a
        # bare "cuda" with the index of an earlier simulation in this process
        asked = kwargs.get("device")
        cuda = [a.device for a in tree_flatten(args)[0] if is_cuda(a)]
        device = cuda[0] if asked is None else torch.device(asked)
        if device.index is None:
            device = fake_cuda.current_cuda()
        cpu_kwargs = dict(kwargs)
        if "device" in cpu_kwargs:
            cpu_kwargs["device"] = torch.device("cpu")
        out = func(*tree_map(to_cpu, args), **tree_map(to_cpu, cpu_kwargs))
        return tree_map(
            lambda x: (
                torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device)
                if isinstance(x, torch.Tensor)
                else x
            ),
            out,
        )

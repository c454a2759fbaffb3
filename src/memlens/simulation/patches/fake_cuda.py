"""Patches that let unmodified CUDA code run on fake tensors in a CPU-only PyTorch.

How it works (checked on torch 2.13 CPU):
- `FakeTensorMode` builds tensors whose Python `.device` is `cuda:0` without touching a GPU.
- But a CPU-only build has no CUDA device guard, so autograd (which asks the guard for the
  tensor's stream) aborts the process. We therefore build fake CUDA tensors with CPU
  *dispatch keys* and make the C++ `device()` query (`prim.device`) answer `cpu`, while the
  Python `.device`, `.is_cuda` and FakeTensorMode's own device checks still say `cuda:0`.
  Autograd, optimizers and `nn.Module.to` then run as on CPU.
- Consequence: CUDA autocast would not apply to CPU-keyed tensors, so entering
  `torch.autocast("cuda", dtype)` also switches the AutocastCPU key on, whose kernels
  follow CUDA's cast lists while simulating (autocast.py).
- `Tensor.to`/`.cuda` go straight to `aten._to_copy` because their Python bindings would
  initialise CUDA. `torch.utils.swap_tensors` (used by `Module.to` on fake parameters)
  fails on the fake-tensor converter's memo weakrefs, which we drop first.
Every patch is undone by `Patches.restore()`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from memlens.simulation.patches.autocast import CudaAutocast

CPU = torch.device("cpu")
META = torch.device("meta")


def current_cuda() -> torch.device:
    """What `cuda` without an index means now: the device `torch.cuda.set_device` chose
    (a simulated rank's LOCAL_RANK), cuda:0 unless it was called."""
    return torch.device("cuda", torch.cuda.current_device())


_PRIM_DEVICE = torch.ops.prim.device.default


class Patches:
    """Remembers how to undo every change so that restore() puts everything back."""

    _ABSENT = object()  # the attribute was inherited, not set on the owner itself

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, owner: Any, name: str, value: Any) -> None:
        saved = vars(owner).get(name, self._ABSENT)

        def undo() -> None:
            if saved is self._ABSENT:
                delattr(owner, name)
            else:
                setattr(owner, name, saved)

        self._undo.append(undo)
        setattr(owner, name, value)

    def append(self, items: list[Any], value: Any) -> None:
        items.append(value)
        self._undo.append(lambda: items.remove(value))

    def on_restore(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()


def _cpu_keys_make_subclass(original: Callable[..., Any]) -> Callable[..., Any]:
    def _make_subclass(cls: Any, data: Any, requires_grad: bool = False, **kwargs: Any) -> Any:
        device = kwargs.get("device_for_backend_keys")
        if cls is FakeTensor and device is not None and device.type == "cuda":
            kwargs["device_for_backend_keys"] = CPU
        return original(cls, data, requires_grad, **kwargs)

    return _make_subclass


def prim_device(func: Any, args: Any) -> torch.device | None:
    """The C++ device of a fake tensor (`prim.device`), answered as FakeTensor's and
    FakeTensorMode's own code would (fake_tensor.py's prim.device branch, _device_handler)
    with fake CUDA read as `cpu`, or None where this is not that question. C++ asks a
    tensor's device about once for every op (28,000 of the 44,000 ops a 4-layer cs336
    step dispatches), so this path is hot: the tracker answers it before anything else."""
    if func is _PRIM_DEVICE and len(args) == 1:
        tensor = args[0]
        if isinstance(tensor, FakeTensor):
            if tensor.fake_mode.in_kernel_invocation:
                return META
            device = tensor.fake_device
            return CPU if device.type == "cuda" else device
    return None


def _cpu_prim_device(original: Callable[..., Any], *, is_class: bool) -> Any:
    def dispatch(
        self_or_cls: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        # without the wrappers around FakeTensor's and FakeTensorMode's dispatch
        answer = prim_device(func, args)
        if answer is not None:
            return answer
        out = original(self_or_cls, func, types, args, kwargs)
        if func is _PRIM_DEVICE and out.type == "cuda":
            return CPU
        return out

    return classmethod(dispatch) if is_class else dispatch


def as_cuda(device: Any) -> Any:
    """`device`, with a bare index (not a bool) read as that CUDA device: a CPU-only build
    reads it as its accelerator's, and has none (simulation/patches/device_index.py)."""
    if isinstance(device, int) and not isinstance(device, bool):
        return torch.device("cuda", device)
    return device


def cuda_indices(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """`.to(...)`'s arguments with a bare index read as a CUDA device: the first positional
    one (`to(0)`, `to(0, torch.bfloat16)`) or `device=`. `kwargs` is changed in place."""
    if "device" in kwargs:
        kwargs["device"] = as_cuda(kwargs["device"])
    if args:
        return (as_cuda(args[0]), *args[1:])
    return args


def _target_device(device: Any) -> torch.device:
    if device is None:
        return current_cuda()
    return torch.device(as_cuda(device))


class _Named:
    """How deep in `Tensor.to` / `.cpu()` / `.cuda()` the thread is: the device of the
    `_to_copy` they dispatch is one the caller named in Python, not a C++ tensor's
    options() (which read `cpu` on fake CUDA tensors; see simulation/patches/tracker.py)."""

    depth = 0


def device_was_named() -> bool:
    """Whether the op being dispatched is `Tensor.to`'s copy to a device named in Python
    (e.g. FSDP2's CPU offload moving a gradient to the host inside a backward hook)."""
    return _Named.depth > 0


def make_to(original_to: Callable[..., Any]) -> Callable[..., Any]:
    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        copy = kwargs.pop("copy", False)
        args = cuda_indices(args, kwargs)  # `.to(local_rank)` on a CPU-only build
        device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        if (device is None or device.type != "cuda") and self.device.type != "cuda":
            return original_to(self, *args, copy=copy, **kwargs)
        device = self.device if device is None else device
        if device.type == "cuda" and device.index is None:
            device = current_cuda()
        dtype = dtype or self.dtype
        keep_format = memory_format in (None, torch.preserve_format)
        if device == self.device and dtype == self.dtype and not copy and keep_format:
            return self
        _Named.depth += 1
        try:
            return torch.ops.aten._to_copy.default(
                self,
                dtype=dtype,
                device=device,
                non_blocking=bool(non_blocking),
                memory_format=memory_format,
            )
        finally:
            _Named.depth -= 1

    return to


def make_type_as(to: Callable[..., Any]) -> Callable[..., Any]:
    """`type_as` is `to(other.options())` in C++, whose device reads `cpu` on a fake CUDA
    tensor: Inductor's `_fused_rms_norm` decomposition ends in `type_as(input)`, and a
    compiled bf16 RMSNorm returned a host tensor. So it goes through `to` with the Python
    device. But AOTAutograd's FunctionalTensor wrappers take their Python device from the
    C++ one, `cpu`, for every fake CUDA tensor alike: naming it moved the value to the host
    (torchtitan's rotary embedding, `xq_out.type_as(xq)`, compiled, sent the attention's
    query to the CPU and the whole block ran eagerly). Two tensors that read the same
    device are on the same device, whatever the wrapper: then only the dtype changes."""

    def type_as(self: torch.Tensor, other: torch.Tensor) -> Any:
        if self.device == other.device:
            return to(self, dtype=other.dtype)
        return to(self, device=other.device, dtype=other.dtype)

    return type_as


def make_format(original_format: Callable[..., Any]) -> Callable[..., Any]:
    """`f"{loss:.4f}"` of a one-element fake: formatted as its `.item()` (its value where
    the simulation knows it, else 0 with a note), as a real tensor formats; Tensor's own
    `__format__` does that only for exactly `torch.Tensor`, so a FakeTensor raised
    "unsupported format string" (nanoGPT's evaluation print)."""

    def format_(self: torch.Tensor, format_spec: str) -> str:
        if isinstance(self, FakeTensor) and self.dim() == 0:
            return format(self.item(), format_spec)
        return str(original_format(self, format_spec))

    return format_


_DATA = torch._C.TensorBase.data


def _data(self: torch.Tensor) -> torch.Tensor:
    return _DATA.__get__(self)  # type: ignore[attr-defined,no-any-return]


def _set_data(self: torch.Tensor, value: torch.Tensor) -> None:
    """`param.data = other` takes `other`'s device too, as on a GPU: a fake's device is
    its Python `fake_device`, which the C++ setter leaves as it was (FSDP1 moves a host
    model's parameters to the GPU so, then reads `param.device` for its compute device)."""
    _DATA.__set__(self, value)  # type: ignore[attr-defined]
    if isinstance(self, FakeTensor) and isinstance(value, FakeTensor):
        self.fake_device = value.fake_device


_MODULE_APPLY = torch.nn.Module._apply.__code__


def _gpu_assigns_data(caller: Any) -> bool:
    """Whether `Module._apply` (`caller`) swaps only because its tensors are fakes: with
    real tensors of any device and neither `torch.__future__` flag set, it assigns
    `param.data = param_applied` (compute_should_use_set_data), which frees the old
    storage at once. A swap leaves it in `param_applied` until the next parameter's copy
    is made: `model.cuda().half()` held two parameters' old copies at a time, one
    parameter's worth above the GPU's peak."""
    return (
        caller.f_code is _MODULE_APPLY
        and not torch.__future__.get_swap_module_params_on_conversion()
        and not torch.__future__.get_overwrite_module_params_on_conversion()
    )


def make_swap_tensors(original_swap: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """`torch.utils.swap_tensors` for fakes, which `Module._apply` (`.to`, `.half()`, ...)
    swaps where a GPU run assigns `.data`."""

    def assign_data(t1: Any, t2: Any) -> None:
        with torch.no_grad():
            t1.data = t2  # and its fake device (_set_data)

    def swap_tensors(t1: Any, t2: Any) -> None:
        fakes = isinstance(t1, FakeTensor) and isinstance(t2, FakeTensor)
        for t in (t1, t2):
            if isinstance(t, FakeTensor):
                memo = t.fake_mode.fake_tensor_converter.tensor_memo
                for key in [k for k, v in list(memo.items()) if v is t]:
                    del memo[key]
        if fakes and _gpu_assigns_data(sys._getframe(1)):
            return assign_data(t1, t2)
        try:
            return original_swap(t1, t2)
        except RuntimeError:
            if not fakes:
                raise
        # Other references to t1 (a failed step's autograd graph, held by its traceback,
        # when Lightning moves the model to CPU after an OOM): assign `.data` instead.
        return assign_data(t1, t2)

    return swap_tensors


def install(
    patches: Patches, cuda_api: dict[str, Callable[..., Any]], note: Callable[[str], None]
) -> CudaAutocast:
    """Install the tensor-level patches and the torch.cuda functions in `cuda_api`; `note`
    records a path known to be approximate. Returns CUDA autocast's policy."""
    patches.set(
        torch.Tensor,
        "_make_subclass",
        staticmethod(_cpu_keys_make_subclass(torch.Tensor._make_subclass)),
    )
    patches.set(
        FakeTensor,
        "__torch_dispatch__",
        # a classmethod: its bound method has __func__ (torch types it as a plain callable)
        _cpu_prim_device(FakeTensor.__torch_dispatch__.__func__, is_class=True),  # type: ignore[attr-defined]
    )
    patches.set(
        FakeTensorMode,
        "__torch_dispatch__",
        _cpu_prim_device(FakeTensorMode.__torch_dispatch__, is_class=False),
    )
    # FakeTensorMode asks torch.cuda.is_available() (True here) to decide whether it may
    # materialize small constant tensors on the device (`torch.tensor(0.0, device="cuda")`
    # in HF's Trainer): a CPU-only build has no CUDA kernels, so it must keep avoiding that.
    patches.set(FakeTensorMode, "avoid_device_init", property(lambda self: True))
    # `.is_cuda` reads the C++ keys, which are CPU ones here; answer from the fake device.
    patches.set(FakeTensor, "is_cuda", property(lambda self: self.fake_device.type == "cuda"))
    patches.set(FakeTensor, "data", property(_data, _set_data))
    to = make_to(torch.Tensor.to)
    patches.set(torch.Tensor, "to", to)

    def cuda(
        self: torch.Tensor,
        device: Any = None,
        non_blocking: bool = False,
        memory_format: torch.memory_format = torch.preserve_format,
    ) -> Any:
        return to(
            self, _target_device(device), non_blocking=non_blocking, memory_format=memory_format
        )

    patches.set(torch.Tensor, "cuda", cuda)
    # `.cpu()` checks the C++ device, which says `cpu` here: it would return the CUDA fake
    # itself (Lightning's teardown moving the model off the GPU would keep its memory).
    patches.set(
        torch.Tensor,
        "cpu",
        lambda self, memory_format=torch.preserve_format: to(
            self, CPU, memory_format=memory_format
        ),
    )
    patches.set(torch.Tensor, "type_as", make_type_as(to))
    patches.set(torch.Tensor, "__format__", make_format(torch.Tensor.__format__))
    # Pinned host memory and cross-stream bookkeeping have no meaning without a device.
    patches.set(torch.Tensor, "pin_memory", lambda self, device=None: self)
    patches.set(torch.Tensor, "is_pinned", lambda self, device=None: False)
    patches.set(torch.Tensor, "record_stream", lambda self, stream: None)
    swap_tensors = make_swap_tensors(torch.utils.swap_tensors)
    patches.set(torch.utils, "swap_tensors", swap_tensors)
    # Rejection sampling asks `mask.any()`, a value fake tensors do not have; values do
    # not matter here, so truncated-normal init leaves the tensor as it is.
    patches.set(torch.nn.init, "trunc_normal_", lambda tensor, *args, **kwargs: tensor)
    policy = _install_autocast(patches)
    # Optimizers pick their foreach (multi-tensor) path only for plain tensor types; on a
    # GPU that is the default path, with its own temporaries, so fakes must take it too.
    import torch.optim.optimizer as optimizer_module
    import torch.utils._foreach_utils as foreach_utils

    patches.append(optimizer_module._foreach_supported_types, FakeTensor)
    patches.append(foreach_utils._foreach_supported_types, FakeTensor)
    for name, fn in cuda_api.items():
        module_name, _, attr = name.rpartition(".")
        module = torch.cuda if module_name == "" else getattr(torch.cuda, module_name)
        patches.set(module, attr, fn)
    return policy


def _install_autocast(patches: Patches) -> CudaAutocast:
    # CUDA autocast's policy on the AutocastCPU key (fakes carry CPU keys): see autocast.py.
    policy = CudaAutocast()
    policy.install()
    patches.on_restore(policy.remove)
    cls = torch.amp.autocast_mode.autocast  # torch.cuda.amp.autocast subclasses it
    enter: Callable[[Any], Any] = cls.__enter__
    exit_: Callable[..., Any] = cls.__exit__

    def __enter__(self: Any) -> Any:
        result = enter(self)
        if self.device == "cuda":
            self._memlens_cpu = torch.is_autocast_enabled("cpu")
            torch.set_autocast_enabled("cpu", self._enabled)
        return result

    def __exit__(self: Any, *exc: Any) -> Any:
        saved = getattr(self, "_memlens_cpu", None)
        if saved is not None:
            torch.set_autocast_enabled("cpu", saved)
        return exit_(self, *exc)

    clear = torch.clear_autocast_cache

    def clear_autocast_cache() -> None:
        # called when the outermost autocast exits
        policy.clear_cache()
        clear()

    patches.set(cls, "__enter__", __enter__)
    patches.set(cls, "__exit__", __exit__)
    patches.set(torch, "clear_autocast_cache", clear_autocast_cache)
    return policy

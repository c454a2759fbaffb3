"""CUDA autocast for fake CUDA tensors, following PyTorch's own CUDA cast lists.

Fake CUDA tensors carry CPU dispatch keys (see fake_cuda), so CUDA's autocast kernels
never run on them and CPU autocast's lists differ from CUDA's (CPU keeps `exp`, `sum`,
`softmax`, `pow` in the low dtype; CUDA runs them in fp32). While a simulation runs, the
AutocastCPU dispatch key therefore gets CUDA's policy instead: every op CUDA autocast
registers gets a kernel that casts as CUDA's would (the casting rules of
aten/src/ATen/autocast_mode.h), and every op only CPU autocast knows falls through.
Entering `torch.autocast("cuda", ...)` (or `torch.cuda.amp.autocast`) switches the
AutocastCPU key on so those kernels are reached. The library is removed on exit.

The lists below are CUDA's `AT_FORALL_*` lists of aten/src/ATen/autocast_mode.h, used by
the CUDA block of autocast_mode.cpp (torch 2.13). Names only; the installed PyTorch ships
the header, and tests/simulate/test_simulate_autocast.py checks these lists against it.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.functional_tensor import FunctionalTensor

# (op, overload); "" is the default overload.
LOWER_PRECISION_FP: tuple[tuple[str, str], ...] = (
    ("_convolution", "deprecated"),
    ("_convolution", ""),
    ("conv1d", ""),
    ("conv2d", ""),
    ("conv3d", ""),
    ("conv_tbc", ""),
    ("conv_transpose1d", ""),
    ("conv_transpose2d", "input"),
    ("conv_transpose3d", "input"),
    ("convolution", ""),
    ("prelu", ""),
    ("addmm", ""),
    ("addmv", ""),
    ("addr", ""),
    ("matmul", ""),
    ("einsum", ""),
    ("mm", ""),
    ("mv", ""),
    ("linalg_vecdot", ""),
    ("linear", ""),
    ("addbmm", ""),
    ("baddbmm", ""),
    ("bmm", ""),
    ("chain_matmul", ""),
    ("linalg_multi_dot", ""),
    ("_thnn_fused_lstm_cell", ""),
    ("_thnn_fused_gru_cell", ""),
    ("lstm_cell", ""),
    ("gru_cell", ""),
    ("rnn_tanh_cell", ""),
    ("rnn_relu_cell", ""),
    ("_scaled_dot_product_flash_attention", ""),
    ("scaled_dot_product_attention", ""),
    # registered beside the list in autocast_mode.cpp (CUDA-only ops)
    ("cudnn_convolution", ""),
    ("cudnn_convolution_transpose", ""),
)
FP32: tuple[tuple[str, str], ...] = (
    ("acos", ""),
    ("asin", ""),
    ("cosh", ""),
    ("erfinv", ""),
    ("exp", ""),
    ("expm1", ""),
    ("log", ""),
    ("log10", ""),
    ("log2", ""),
    ("log1p", ""),
    ("reciprocal", ""),
    ("rsqrt", ""),
    ("sinh", ""),
    ("tan", ""),
    ("pow", "Tensor_Scalar"),
    ("pow", "Tensor_Tensor"),
    ("pow", "Scalar"),
    ("softplus", ""),
    ("layer_norm", ""),
    ("native_layer_norm", ""),
    ("rms_norm", ""),
    ("group_norm", ""),
    ("frobenius_norm", "dim"),
    ("nuclear_norm", ""),
    ("nuclear_norm", "dim"),
    ("cosine_similarity", ""),
    ("poisson_nll_loss", ""),
    ("cosine_embedding_loss", ""),
    ("nll_loss", ""),
    ("nll_loss2d", ""),
    ("hinge_embedding_loss", ""),
    ("kl_div", ""),
    ("l1_loss", ""),
    ("smooth_l1_loss", ""),
    ("huber_loss", ""),
    ("mse_loss", ""),
    ("margin_ranking_loss", ""),
    ("multilabel_margin_loss", ""),
    ("soft_margin_loss", ""),
    ("triplet_margin_loss", ""),
    ("multi_margin_loss", ""),
    ("binary_cross_entropy_with_logits", ""),
    ("dist", ""),
    ("pdist", ""),
    ("cdist", ""),
    ("renorm", ""),
    ("logsumexp", ""),
    ("upsample_nearest1d", ""),
    ("_upsample_nearest_exact1d", ""),
    ("upsample_nearest2d", ""),
    ("_upsample_nearest_exact2d", ""),
    ("upsample_nearest3d", ""),
    ("_upsample_nearest_exact3d", ""),
    ("upsample_linear1d", ""),
    ("upsample_bilinear2d", ""),
    ("_upsample_bilinear2d_aa", ""),
    ("upsample_trilinear3d", ""),
    ("upsample_bicubic2d", ""),
    ("_upsample_bicubic2d_aa", ""),
)
FP32_SET_OPT_DTYPE: tuple[tuple[str, str], ...] = (
    ("prod", ""),
    ("prod", "dim_int"),
    ("softmax", "int"),
    ("log_softmax", "int"),
    ("cumprod", ""),
    ("cumsum", ""),
    ("linalg_vector_norm", ""),
    ("linalg_matrix_norm", ""),
    ("linalg_matrix_norm", "str_ord"),
    ("sum", ""),
    ("sum", "dim_IntList"),
)
# op -> the overload it is redispatched to, with `dtype` appended
FP32_APPEND_DTYPE: dict[tuple[str, str], tuple[str, str]] = {
    ("norm", "Scalar"): ("norm", "ScalarOpt_dtype"),
    ("norm", "ScalarOpt_dim"): ("norm", "ScalarOpt_dim_dtype"),
}
PROMOTE: tuple[tuple[str, str], ...] = (
    ("addcdiv", ""),
    ("addcmul", ""),
    ("atan2", ""),
    ("bilinear", ""),
    ("cross", ""),
    ("dot", ""),
    ("vdot", ""),
    ("grid_sampler", ""),
    ("index_put", ""),
    ("tensordot", ""),
    ("scatter_add", ""),
)
BANNED: tuple[tuple[str, str], ...] = (("binary_cross_entropy", ""),)

_KEY = "AutocastCPU"
_NO_AUTOCAST = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)


def _overload(op: str, overload: str) -> Any:
    packet = getattr(torch.ops.aten, op, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None)


def _qualified(op: str, overload: str) -> str:
    return f"{op}.{overload}" if overload else op


def device_type(t: torch.Tensor) -> str:
    """The device type a GPU run would see for `t`. A fake's Python `.device` is its fake
    device (`cuda`), whatever its dispatch keys say; while AOTAutograd traces a compiled
    graph, its arguments are FunctionalTensors around such fakes, whose own device is the
    C++ one (`cpu`, see fake_cuda): on a GPU that trace dispatches on CUDA, so what counts
    is the device of the fake inside."""
    if isinstance(t, FunctionalTensor):
        t = torch._from_functional_tensor(t.elem)
    return t.device.type


def _eligible(arg: Any) -> bool:
    # at::autocast::is_eligible for CUDA: a floating CUDA tensor that is not double. Also
    # while AOTAutograd traces a graph called under autocast, so that the compiled graph
    # casts as a GPU's does (its matmuls in the low dtype, not fp32)
    return (
        isinstance(arg, torch.Tensor)
        and arg.is_floating_point()
        and arg.dtype != torch.float64
        and device_type(arg) == "cuda"
    )


class CudaAutocast:
    """Installs CUDA's autocast policy on the AutocastCPU key while a simulation runs."""

    def __init__(self) -> None:
        # at::autocast's cast cache: casts of fp32 leaf weights to the low dtype live
        # until the outermost autocast exits (they are memory the GPU holds too). PyTorch
        # keys it by TensorImpl* and keeps a weak reference, so a cast outlives its weight
        # until the cache is cleared: casts whose weight died are kept in `_orphans`.
        self._cache: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor]] = {}
        self._orphans: list[torch.Tensor] = []
        self._library: Any = None

    # ------------------------------------------------------------ install / remove
    def install(self) -> None:
        lib = torch.library.Library("aten", "IMPL")
        covered: set[str] = set()
        policies: list[tuple[tuple[tuple[str, str], ...], Callable[[Any], Callable[..., Any]]]] = [
            (LOWER_PRECISION_FP, self._lower_precision_fp),
            (FP32, self._fp32),
            (FP32_SET_OPT_DTYPE, self._fp32_set_opt_dtype),
            (PROMOTE, self._promote),
            (BANNED, _banned),
            (tuple(FP32_APPEND_DTYPE), self._fp32_append_dtype),
        ]
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": that is the point here.
            warnings.simplefilter("ignore")
            for ops, make_kernel in policies:
                for op, overload in ops:
                    func = _overload(op, overload)
                    if func is None:  # not in this build
                        continue
                    name = _qualified(op, overload)
                    lib.impl(name, make_kernel((op, overload)), _KEY)
                    covered.add(name)
            # Ops only CPU autocast casts (cat, stack, cross_entropy_loss, ...) are left
            # alone on CUDA: they fall through, as CUDA's autocast fallback does.
            for full in torch._C._dispatch_get_all_op_names():
                if not full.startswith("aten::"):
                    continue
                name = full[len("aten::") :]
                if name not in covered and torch._C._dispatch_has_kernel_for_dispatch_key(
                    full, _KEY
                ):
                    lib.impl(name, torch.library.fallthrough_kernel, _KEY)
        self._library = lib

    def remove(self) -> None:
        self.clear_cache()
        if self._library is not None:
            self._library._destroy()
            self._library = None

    def clear_cache(self) -> None:
        self._cache.clear()
        self._orphans.clear()

    # ------------------------------------------------------------ casting
    @staticmethod
    def low_dtype() -> torch.dtype:
        return torch.get_autocast_dtype("cuda")

    def cached_cast(self, to_type: torch.dtype, arg: Any) -> Any:
        """at::autocast::cached_cast: tensors, lists of tensors; anything else unchanged."""
        if isinstance(arg, (list, tuple)) and any(isinstance(a, torch.Tensor) for a in arg):
            return type(arg)(self.cached_cast(to_type, a) for a in arg)
        if not _eligible(arg) or arg.dtype == to_type:
            return arg
        if not _cacheable(to_type, arg):
            return arg.to(to_type)
        hit = self._cache.get(id(arg))
        if hit is not None:
            if hit[0]() is arg:
                return hit[1]
            self._orphans.append(hit[1])  # its weight died: the GPU keeps it until clear
        # PyTorch casts with grad mode on, so a cast cached under no_grad still carries
        # the graph to the weight when a later grad-enabled call reuses it.
        with torch.enable_grad():
            cast = arg.to(to_type)
        self._cache[id(arg)] = (weakref.ref(arg), cast)
        return cast

    def _run(
        self,
        func: Any,
        cast: Callable[[list[Any], dict[str, Any]], tuple[list[Any], dict[str, Any]]],
    ) -> Callable[..., Any]:
        def kernel(*args: Any, **kwargs: Any) -> Any:
            with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
                if torch.is_autocast_enabled("cuda"):
                    args_, kwargs = cast(list(args), kwargs)
                    return func(*args_, **kwargs)
                return func(*args, **kwargs)

        return kernel

    def _cast_all(
        self, to_type: Callable[[list[Any], dict[str, Any]], torch.dtype]
    ) -> Callable[..., Any]:
        def cast(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
            dtype = to_type(args, kwargs)
            return (
                [self.cached_cast(dtype, a) for a in args],
                {k: self.cached_cast(dtype, v) for k, v in kwargs.items()},
            )

        return cast

    def _lower_precision_fp(self, name: tuple[str, str]) -> Callable[..., Any]:
        return self._run(_overload(*name), self._cast_all(lambda a, k: self.low_dtype()))

    def _fp32(self, name: tuple[str, str]) -> Callable[..., Any]:
        return self._run(_overload(*name), self._cast_all(lambda a, k: torch.float32))

    def _promote(self, name: tuple[str, str]) -> Callable[..., Any]:
        def widest(args: list[Any], kwargs: dict[str, Any]) -> torch.dtype:
            # at::autocast::promote_type: fp32 wins over the low dtype; doubles ignored
            current = self.low_dtype()
            for arg in _tensors([*args, *kwargs.values()]):
                if _eligible(arg) and arg.dtype == torch.float32:
                    current = torch.float32
            return current

        return self._run(_overload(*name), self._cast_all(widest))

    def _fp32_set_opt_dtype(self, name: tuple[str, str]) -> Callable[..., Any]:
        func = _overload(*name)
        index = [a.name for a in func._schema.arguments].index("dtype")

        def cast(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
            # The caller's explicit dtype wins; otherwise fp32 when the first argument is
            # eligible (nothing else is cast: the kernel computes in fp32 itself).
            if not (args and _eligible(args[0])):
                return args, kwargs
            if len(args) > index:
                if args[index] is None:
                    args[index] = torch.float32
            elif kwargs.get("dtype") is None:
                kwargs = {**kwargs, "dtype": torch.float32}
            return args, kwargs

        return self._run(func, cast)

    def _fp32_append_dtype(self, name: tuple[str, str]) -> Callable[..., Any]:
        target = _overload(*FP32_APPEND_DTYPE[name])
        arguments = _overload(*name)._schema.arguments
        names = [a.name for a in arguments]
        defaults = {a.name: a.default_value for a in arguments if a.has_default_value()}

        def kernel(*args: Any, **kwargs: Any) -> Any:
            with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
                values = {**defaults, **dict(zip(names, args)), **kwargs}
                first = values[names[0]]
                eligible = torch.is_autocast_enabled("cuda") and _eligible(first)
                dtype = torch.float32 if eligible else first.dtype
                return target(*(values[n] for n in names), dtype=dtype)

        return kernel


def _cacheable(to_type: torch.dtype, arg: torch.Tensor) -> bool:
    """`can_try_cache` of at::autocast::cached_cast (aten/src/ATen/autocast_mode.cpp),
    every condition in its order: a cast to the device's lower-precision dtype of an fp32
    tensor that requires grad, is a leaf and not a view, while the cache is enabled, the
    tensor is not registered as a cached tensor (CUDA graph trees), and inference mode is
    off (under `torch.inference_mode()` every call casts afresh and the cast dies with
    the op, freed after its matmul)."""
    return (
        to_type == torch.get_autocast_dtype("cuda")
        and arg.dtype == torch.float32
        and arg.requires_grad
        and arg.is_leaf
        and not arg._is_view()
        and torch.is_autocast_cache_enabled()
        and not torch._C._is_cached_tensor(arg)  # type: ignore[attr-defined]
        and not torch.is_inference_mode_enabled()
    )


def _tensors(values: list[Any]) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(t for t in v if isinstance(t, torch.Tensor))
    return out


def _banned(name: tuple[str, str]) -> Callable[..., Any]:
    func = _overload(*name)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if torch.is_autocast_enabled("cuda"):
            raise RuntimeError(
                "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
                "autocast (CUDA autocast refuses them); use binary_cross_entropy_with_logits "
                "or BCEWithLogitsLoss."
            )
        with torch._C._ExcludeDispatchKeyGuard(_NO_AUTOCAST):
            return func(*args, **kwargs)

    return kernel

"""`F.scaled_dot_product_attention` as PyTorch's CUDA dispatch runs it on the assumed GPU.

On a CPU build, SDPA picks a CPU kernel (a CPU flash kernel for some dtypes and shapes,
the math path with its full (B, H, S, S) score matrix for others), so a simulation would
allocate what the CPU would. Here the backend is chosen as `select_sdp_backend`
(aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, read, not copied) chooses it for
the `--gpu` card, honouring `torch.nn.attention.sdpa_kernel`, the
`torch.backends.cuda.enable_*_sdp` flags and the priority order, and the chosen CUDA op
runs on the fakes (its meta kernel gives the outputs). What each kernel allocates besides
its outputs is added around them by `kernel_memory`, in the order the CUDA code
allocates and frees it (flash_attn/flash_api.cpp `mha_fwd` / `mha_bwd`, attention.cu,
attention_backward.cu). Known gaps are in docs/simulation.md.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from memlens.simulation.patches.autocast import device_type

if TYPE_CHECKING:
    from memlens.simulation.gpus import Gpu
    from memlens.simulation.host import SimulationHost
    from memlens.simulation.patches.fake_cuda import Patches

MATH, FLASH, EFFICIENT, CUDNN = 0, 1, 2, 3  # at::SDPBackend
NAMES = {MATH: "math", FLASH: "flash", EFFICIENT: "efficient", CUDNN: "cudnn"}
HALF = (torch.float16, torch.bfloat16)
_aten = torch.ops.aten
CUDNN_VERSION = 90100  # what torch.backends.cudnn.version() answers (cuda_surface)


def _sm(gpu: Gpu, low: tuple[int, int], high: tuple[int, int]) -> bool:
    return low <= gpu.capability <= high


def _dense_common(q: Any, k: Any, v: Any, gqa: bool, ignore_singleton: bool) -> bool:
    """check_nonzero_sequence_lengths_dense, check_last_dim_stride_equals_1_dense,
    check_batch_size_and_num_heads_dense (sdp_utils_cpp.h)."""
    if q.size(-2) == 0 or k.size(-2) == 0:
        return False
    for t in (q, k, v):
        if t.stride(-1) != 1 and not (ignore_singleton and t.size(-1) == 1):
            return False
    if not (q.size(0) == k.size(0) == v.size(0)):
        return False
    hq, hk, hv = q.size(1), k.size(1), v.size(1)
    if hq == hk == hv:
        return True
    return gqa and hk == hv and hq % hk == 0


def on_cuda(t: Any) -> bool:
    """A CUDA tensor; also, while AOTAutograd traces a compiled graph, a FunctionalTensor
    around a fake CUDA tensor (autocast.device_type)."""
    return isinstance(t, torch.Tensor) and device_type(t) == "cuda"


def _common(q: Any, k: Any, v: Any) -> bool:
    # check_all_tensors_on_device, check_tensor_shapes (4-d q, k, v)
    return all(on_cuda(t) for t in (q, k, v)) and q.dim() == k.dim() == v.dim() == 4


def can_use_flash(
    gpu: Gpu, q: Any, k: Any, v: Any, mask: Any, dropout: float, causal: bool, gqa: bool, grad: bool
) -> bool:
    d = q.size(-1)
    if not (torch.backends.cuda.flash_sdp_enabled() and _common(q, k, v) and mask is None):
        return False
    if not (d == k.size(-1) == v.size(-1) and d <= 256 and _sm(gpu, (8, 0), (12, 1))):
        return False
    # training with head_dim in (192, 224] (or (224, 256] with dropout) on sm86/89/120/121
    ada_or_sm12 = _sm(gpu, (8, 6), (8, 9)) or _sm(gpu, (12, 0), (12, 1))
    if grad and ada_or_sm12 and not (d <= 192 or (dropout == 0.0 and d > 224)):
        return False
    if causal and q.size(-2) != k.size(-2):
        return False
    if not (q.dtype in HALF and k.dtype == q.dtype == v.dtype):
        return False
    return _dense_common(q, k, v, gqa, ignore_singleton=True)


def _gemm_alignment(gpu: Gpu, dtype: torch.dtype) -> int:
    # minimum_gemm_alignment: tensor cores from sm80 always, sm70 for half only
    half = dtype in HALF
    tensor_cores = gpu.capability[0] >= 8 or (gpu.capability[0] >= 7 and half)
    alignment = 4 if gpu.capability[0] >= 8 else 1
    return max(alignment, 128 // (16 if half else 32)) if tensor_cores else alignment


def can_use_efficient(gpu: Gpu, q: Any, k: Any, v: Any, gqa: bool) -> bool:
    if not (torch.backends.cuda.mem_efficient_sdp_enabled() and _common(q, k, v)):
        return False
    if not _sm(gpu, (5, 0), (12, 1)):
        return False
    align = _gemm_alignment(gpu, q.dtype)
    dq, dv = q.size(-1), v.size(-1)
    if not (dq == k.size(-1) and dq % align == 0 and dq > 0 and dv % align == 0 and dv > 0):
        return False
    if gpu.capability[0] >= 8 and any(
        t.numel() and (t.storage_offset() * t.element_size()) % (align * t.element_size())
        for t in (q, k, v)
    ):
        return False
    if not _dense_common(q, k, v, gqa, ignore_singleton=False):
        return False
    dtypes = (*HALF, torch.float32) if gpu.capability[0] >= 8 else (torch.float16, torch.float32)
    return q.dtype in dtypes and k.dtype == q.dtype == v.dtype


def can_use_cudnn(gpu: Gpu, q: Any, k: Any, v: Any, mask: Any, dropout: float, gqa: bool) -> bool:
    if not (torch.backends.cuda.cudnn_sdp_enabled() and _common(q, k, v)):
        return False
    if torch.are_deterministic_algorithms_enabled() and not (
        torch.is_deterministic_algorithms_warn_only_enabled()
    ):
        return False
    if not (q.dtype in HALF and k.dtype == q.dtype == v.dtype and _sm(gpu, (8, 0), (12, 1))):
        return False
    if dropout * 16.0 != math.floor(dropout * 16.0):
        return False
    if not _dense_common(q, k, v, gqa, ignore_singleton=True):
        return False
    # check_cudnn_tensor_shapes for cuDNN 9.1: head dims at most 128 and multiples of 8
    d_qk, d_v, s_q, s_k = q.size(3), v.size(3), q.size(2), k.size(2)
    if q.size(0) > 65535 or q.size(1) > 65535:
        return False
    if not (d_qk <= 128 and d_v <= 128 and d_qk % 8 == 0 and d_v % 8 == 0):
        return False
    return s_k != 1 and not (dropout != 0.0 and s_q == 1)


@dataclass(frozen=True)
class Attention:
    """One scaled_dot_product_attention call as the dispatch sees it: query, key and value,
    the attention mask (additive by then), dropout, causal, scale, grouped-query heads."""

    q: Any
    k: Any
    v: Any
    mask: Any = None
    dropout: float = 0.0
    causal: bool = False
    scale: float | None = None
    gqa: bool = False


def choose(gpu: Gpu, a: Attention) -> int:
    """The SDPBackend PyTorch's CUDA dispatch picks on `gpu` (select_sdp_backend)."""
    q, k, v = a.q, a.k, a.v
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    checks: dict[int, Callable[[], bool]] = {
        CUDNN: lambda: can_use_cudnn(gpu, q, k, v, a.mask, a.dropout, a.gqa),
        FLASH: lambda: can_use_flash(gpu, q, k, v, a.mask, a.dropout, a.causal, a.gqa, grad),
        EFFICIENT: lambda: can_use_efficient(gpu, q, k, v, a.gqa),
        MATH: torch.backends.cuda.math_sdp_enabled,
    }
    for backend in torch._C._get_sdp_priority_order():
        check = checks.get(backend)
        if check is not None and check():
            return backend
    raise RuntimeError("No available kernel. Aborting execution.")


def _pad8(t: torch.Tensor) -> torch.Tensor:
    d = t.size(-1)
    return t if d % 8 == 0 else torch.nn.functional.pad(t, (0, 8 - d % 8))


def _scale(q: torch.Tensor, scale: float | None) -> float:
    return 1.0 / math.sqrt(q.size(-1)) if scale is None else scale


def make_sdpa(sim: SimulationHost, original: Callable[..., Any]) -> Callable[..., Any]:
    def scaled_dot_product_attention(
        query: Any,
        key: Any,
        value: Any,
        attn_mask: Any = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Any:
        if not all(on_cuda(t) for t in (query, key, value)):
            return original(
                query,
                key,
                value,
                attn_mask,
                dropout_p,
                is_causal,
                scale=scale,
                enable_gqa=enable_gqa,
            )
        autocast = torch.is_autocast_enabled("cuda")
        if autocast:  # lower_precision_fp: cast, then the kernels run with autocast off
            low = torch.get_autocast_dtype("cuda")
            policy = sim.autocast_policy
            query, key, value = (policy.cached_cast(low, t) for t in (query, key, value))
            attn_mask = policy.cached_cast(low, attn_mask)
        attn_mask = _bool_mask_to_additive(attn_mask, query.dtype)
        call = Attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
        backend = choose(sim.gpu, call)
        sim.sdpa_backends.append(NAMES[backend])
        with torch.autocast("cuda", enabled=False) if autocast else contextlib.nullcontext():
            return _run(backend, call)

    return scaled_dot_product_attention


def _run(backend: int, a: Attention) -> torch.Tensor:
    q, k, v, mask, dropout, causal, scale = a.q, a.k, a.v, a.mask, a.dropout, a.causal, a.scale
    if backend == FLASH:
        og = q.size(-1)
        qp, kp, vp = _pad8(q), _pad8(k), _pad8(v)
        out = _first(
            lambda: _aten._scaled_dot_product_flash_attention(
                qp, kp, vp, dropout, causal, False, scale=_scale(q, scale)
            )
        )
        return out if og % 8 == 0 else out[..., :og]
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    if backend == EFFICIENT:
        if mask is not None:
            mask = _efficient_mask(mask, q, k)
        if k.size(1) != q.size(1):
            # grouped-query heads: the CUDA kernel's handling was not checked against the
            # source; key and value are repeated to the query's heads (approximate: two
            # copies a GPU may not make), so that backward has the right shapes
            groups = q.size(1) // k.size(1)
            k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        return _first(
            lambda: _aten._scaled_dot_product_efficient_attention(
                q, k, v, mask, grad, dropout, causal, scale=scale
            )
        )
    if backend == CUDNN:
        return _first(
            lambda: _aten._scaled_dot_product_cudnn_attention(
                q, k, v, mask, grad, dropout, causal, False, scale=scale
            )
        )
    return _first(
        lambda: _aten._scaled_dot_product_attention_math(
            q, k, v, mask, dropout, causal, None, scale=scale, enable_gqa=a.gqa
        )
    )


def _first(kernel: Callable[[], tuple[torch.Tensor, ...]]) -> torch.Tensor:
    """`std::get<0>(kernel(...))`: the rest of the tuple is released first to last, as
    the C++ tuple's destructor releases it (a Python tuple releases last to first)."""
    items: list[torch.Tensor | None] = list(kernel())
    for i in range(1, len(items)):
        items[i] = None
    first = items[0]
    assert first is not None
    return first


def _bool_mask_to_additive(mask: Any, dtype: torch.dtype) -> Any:
    """convert_boolean_attn_mask (attention.cpp), before any backend: a boolean mask
    becomes where(mask, 0, -inf) in the query's dtype."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    neg_inf = torch.scalar_tensor(float("-inf"), dtype=dtype, device=mask.device)
    return torch.where(mask, 0.0, neg_inf)


def _efficient_mask(mask: torch.Tensor, q: Any, k: Any) -> torch.Tensor:
    """preprocess_mask (attention.cpp): a mask whose strides are not multiples of 8 (or
    whose last stride is not 1) is padded by 8 - last % 8 and sliced back (pad_bias),
    then expanded to (B, H, S_q, S_k)."""
    aligned = all(st % 8 == 0 for st in mask.stride()[:-1]) and mask.stride(-1) == 1
    if not aligned:
        last = mask.size(-1)
        mask = torch.nn.functional.pad(mask, (0, 8 - last % 8))[..., :last]
    return mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))


# ------------------------------------------------------------------ kernel memory
def _free(sim: SimulationHost, address: int | None) -> None:
    if address is not None:
        sim.allocator.free(address, sim._stack())


def _nbytes(*shape_and_size: int) -> int:
    return math.prod(shape_and_size)


def num_splits(batch_nheads_mblocks: int, num_sms: int, num_n_blocks: int, max_splits: int) -> int:
    """flash_api.cpp num_splits_heuristic: splits of the keys for short queries."""
    if batch_nheads_mblocks >= 0.8 * num_sms:
        return 1
    max_splits = min(max_splits, num_sms, num_n_blocks)

    def ceildiv(a: int, b: int) -> int:
        return (a + b - 1) // b

    def eligible(s: int) -> bool:
        return s == 1 or ceildiv(num_n_blocks, s) != ceildiv(num_n_blocks, s - 1)

    efficiency = {}
    for s in range(1, max_splits + 1):
        if eligible(s):
            waves = batch_nheads_mblocks * s / num_sms
            efficiency[s] = waves / math.ceil(waves)
    best = max(efficiency.values(), default=0.0)
    return next((s for s, e in efficiency.items() if e >= 0.85 * best), 1)


def _round(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def _flash_forward(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
    q, k = args[0], args[1]
    dropout = args[3] if len(args) > 3 else 0.0
    b, h, s_q, d = q.shape
    h_k, s_k = k.size(1), k.size(2)
    if s_q == 1 and h > h_k and dropout == 0.0:  # seqlenq_ngroups_swapped
        s_q, h = h // h_k, h_k
    sim._track_outputs(out[0])  # out = empty_like(q_padded)
    sim._track_outputs(out[1])  # softmax_lse (B, H, S_q) fp32
    temporaries: list[int] = []
    if dropout == 0.0:  # set_params_splitkv: split-KV accumulators for short queries
        block_n = 256 if d <= 64 else (128 if d <= 128 else 64)
        splits = num_splits(
            b * h * _round(s_q, 64) // 64,
            sim.gpu.multiprocessors * 2,
            _round(s_k, block_n) // block_n,
            128,
        )
        if splits > 1:
            d_rounded = _round(d, 32 if d <= 128 else 64)
            temporaries.append(sim._malloc(_nbytes(splits, b, h, s_q, 4)))
            temporaries.append(sim._malloc(_nbytes(splits, b, h, s_q, d_rounded, 4)))
    if dropout > 0.0:  # rng_state, _unused, then a new rng_state replaces the first
        first_rng = sim._malloc(16)
        sim._track_outputs(out[7])
        sim._track_outputs(out[6])
        _free(sim, first_rng)
    else:
        sim._track_outputs(out[6])  # rng_state: 2 x uint64
        sim._track_outputs(out[7])  # _unused: uint64
    for address in temporaries:  # at mha_fwd's return: lse_accum, then out_accum
        _free(sim, address)


def _contiguous_copy(sim: SimulationHost, t: Any) -> int | None:
    """`.contiguous()` of the (B, S, H, D) view the CUDA code takes: a copy when it is
    not contiguous already."""
    view = t.transpose(1, 2)
    return None if view.is_contiguous() else sim._malloc(t.numel() * t.element_size())


def _flash_backward(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
    grad_out, q, k = args[0], args[1], args[2]
    copies = [_contiguous_copy(sim, grad_out), _contiguous_copy(sim, args[4])]
    sim._track_outputs(out)  # dq, dk, dv = empty_like(q, k, v)
    b, h, s_q, d = q.shape
    h_k, s_k = k.size(1), k.size(2)
    s_q_rounded, d_rounded = _round(s_q, 128), _round(d, 32 if d <= 128 else 64)
    softmax_d = sim._malloc(_nbytes(b, h, s_q_rounded, 4))
    splits = 1
    if torch.are_deterministic_algorithms_enabled() and not (
        torch.is_deterministic_algorithms_warn_only_enabled()
    ):
        splits = (sim.gpu.multiprocessors + b * h - 1) // (b * h)
    dq_accum = sim._malloc(_nbytes(splits, b, s_q_rounded, h, d_rounded, 4))
    expanded = []
    if h_k != h:  # MQA / GQA: dK, dV for every query head, then summed
        expanded = [sim._malloc(_nbytes(b, s_k, h, d, q.element_size())) for _ in range(2)]
    for address in [*reversed(expanded), dq_accum, softmax_d, *reversed(copies)]:
        _free(sim, address)


def _efficient_forward(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
    q, v = args[0], args[2]
    sim._track_outputs(out[0])  # res (B, M, H, Kv)
    sim._track_outputs(out[1])  # logsumexp (B, H, ceil(M / 32) * 32) fp32, when asked
    # seed and offset are host tensors (Note [Seed and Offset Device]): nothing here,
    # nor in a compiled graph, whose trace (the meta kernel) says they are on the device
    mark_host(out[2], out[3])
    # fp16/bf16 with a head dim above 128: the 32x128 "gmem" kernel, whose fp32 output
    # accumulator lives until the forward returns
    if q.dtype in HALF and max(q.size(-1), v.size(-1)) > 128:
        _free(sim, sim._malloc(_nbytes(q.size(0), q.size(2), q.size(1), v.size(-1), 4)))


def _efficient_backward(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
    grad_out, q = args[0], args[1]
    copy = _contiguous_copy(sim, grad_out)
    sim._track_outputs(out)  # grad_q, grad_k, grad_v (grad_bias)
    b, h, m = q.size(0), q.size(1), q.size(2)
    delta = sim._malloc(_nbytes(b, h, m, 4))  # (B, H, M) fp32
    _free(sim, delta)
    _free(sim, copy)


def _cudnn_forward(sim: SimulationHost, args: tuple[Any, ...], out: Any) -> None:
    sim._track_outputs(out[0])
    sim._track_outputs(out[1])  # softmax stats (B, H, S_q, 1) fp32, when asked
    if len(args) > 5 and args[5] > 0.0:  # dropout: seed and offset on the device
        sim._track_outputs((out[6], out[7]))
    else:
        mark_host(out[6], out[7])


_HOST = "_memlens_on_host"


def mark_host(*outputs: Any) -> None:
    """Outputs the CUDA kernel makes on the host although its meta kernel (and so a
    compiled graph's trace) puts them on the device: a graph runner allocates no block
    for them (an attribute, not a set: a tensor's `==` is elementwise)."""
    for t in outputs:
        setattr(t, _HOST, True)


def on_host(t: Any) -> bool:
    return bool(getattr(t, _HOST, False))


KERNELS: dict[Any, Callable[[SimulationHost, tuple[Any, ...], Any], None]] = {
    _aten._scaled_dot_product_flash_attention.default: _flash_forward,
    _aten._scaled_dot_product_flash_attention_backward.default: _flash_backward,
    _aten._scaled_dot_product_efficient_attention.default: _efficient_forward,
    _aten._scaled_dot_product_efficient_attention_backward.default: _efficient_backward,
    _aten._scaled_dot_product_cudnn_attention.default: _cudnn_forward,
}


def install(patches: Patches, sim: SimulationHost) -> None:
    functional = torch.nn.functional
    patches.set(
        functional,
        "scaled_dot_product_attention",
        make_sdpa(sim, functional.scaled_dot_product_attention),
    )
    # torch.backends.cuda.can_use_*_attention(params, debug): a CUDA build asks the CUDA
    # runtime (torch 2.14.1's fails with no driver), a CPU build says False; the answer is
    # the model's, for the simulated card
    gpu = sim.gpu

    def grad_of(p: Any) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in (p.query, p.key, p.value))

    answers: dict[str, Callable[[Any], bool]] = {
        "_can_use_flash_attention": lambda p: can_use_flash(
            gpu,
            p.query,
            p.key,
            p.value,
            p.attn_mask,
            p.dropout,
            p.is_causal,
            p.enable_gqa,
            grad_of(p),
        ),  # fmt: skip
        "_can_use_mem_efficient_attention": lambda p: can_use_efficient(
            gpu, p.query, p.key, p.value, p.enable_gqa
        ),
        "_can_use_cudnn_attention": lambda p: can_use_cudnn(
            gpu, p.query, p.key, p.value, p.attn_mask, p.dropout, p.enable_gqa
        ),
    }
    for name, answer in answers.items():
        patches.set(torch._C, name, lambda params, debug=False, answer=answer: answer(params))

"""F.scaled_dot_product_attention picks the kernel PyTorch's CUDA dispatch would pick on
the assumed GPU, and allocates what that kernel allocates (memlens.simulation.patches.sdpa).

Sizes are worked out from PyTorch's kernels (flash_attn/flash_api.cpp mha_fwd / mha_bwd,
attention.cu, attention_backward.cu): flash keeps out (B, S, H, D) and the logsumexp
(B, H, S_q) fp32 plus its RNG state (2 x uint64) and an unused uint64; its backward adds
softmax_d (B, H, round128(S_q)) fp32 and dq_accum (B, round128(S_q), H, round32(D)) fp32.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import Tensor  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.patches import sdpa  # noqa: E402

F16 = torch.float16


def events(sim) -> list[tuple[str, int]]:
    snapshot = sim.snapshot or sim.build_snapshot()  # inside the block: so far
    return [
        ("+" if e["action"] == "alloc" else "-", e["size"])
        for e in snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_completed")
    ]


def qkv(
    b: int,
    h: int,
    s: int,
    d: int,
    dtype: object = F16,
    s_k: int | None = None,
    h_k: int | None = None,
    grad: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    s_k, h_k = s_k or s, h_k or h

    def make(*shape: int) -> Tensor:
        made: Tensor = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=grad)
        return made

    return make(b, h, s, d), make(b, h_k, s_k, d), make(b, h_k, s_k, d)


def test_flash_forward_keeps_out_logsumexp_and_the_rng_state():
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim, torch.no_grad():
        q, k, v = qkv(2, 4, 128, 64)
        F.scaled_dot_product_attention(q, k, v)
    size = 2 * 4 * 128 * 64 * 2  # 131,072
    assert sim.sdpa_backends == ["flash"]
    assert events(sim) == [
        ("+", size), ("+", size), ("+", size),  # q, k, v
        ("+", size),  # out
        ("+", 2 * 4 * 128 * 4),  # logsumexp, fp32
        ("+", 16), ("+", 8),  # rng_state, _unused
        ("-", 2 * 4 * 128 * 4), ("-", 16), ("-", 8),  # std::get<0>: the rest released
        ("-", size),  # the result, dropped by the caller
    ]  # fmt: skip


def test_flash_splits_the_keys_for_a_single_query():
    # decode: B=1, H=8, S_q=1, S_k=4096, D=128 on an A100 (108 SMs): 8 row blocks for
    # 216 "SMs" (x2, 128 threads), 32 key blocks of 128: num_splits_heuristic gives 16
    assert sdpa.num_splits(8, 216, 32, 128) == 16
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim, torch.no_grad():
        q, k, v = qkv(1, 8, 1, 128, s_k=4096)
        out = F.scaled_dot_product_attention(q, k, v)
    assert events(sim) == [
        ("+", 2048), ("+", 8 * 2**20), ("+", 8 * 2**20),  # q, k, v
        ("+", 2048), ("+", 32),  # out, logsumexp (1 x 8 x 1 fp32)
        ("+", 16 * 8 * 4), ("+", 16 * 8 * 128 * 4),  # lse_accum, out_accum (16 splits)
        ("+", 16), ("+", 8),
        ("-", 16 * 8 * 4), ("-", 16 * 8 * 128 * 4),  # freed when mha_fwd returns
        ("-", 32), ("-", 16), ("-", 8),
    ]  # fmt: skip
    del out


def test_flash_backward_buffers():
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim:
        q, k, v = qkv(1, 2, 200, 64, grad=True)
        out = F.scaled_dot_product_attention(q, k, v)
        n_forward = len(events(sim))
        out.backward(torch.ones_like(out))
    size = 1 * 2 * 200 * 64 * 2  # 51,200
    backward = events(sim)[n_forward:]
    assert backward[:9] == [
        ("+", size),  # ones_like(out): the incoming gradient
        ("+", size), ("+", size),  # grad_out.transpose(1, 2).contiguous(), out's too
        ("+", size), ("+", size), ("+", size),  # dq, dk, dv
        ("+", 1 * 2 * 256 * 4),  # softmax_d: (B, H, round128(200)) fp32
        ("+", 1 * 256 * 2 * 64 * 4),  # dq_accum: (B, 256, H, round32(64)) fp32
        ("-", 1 * 256 * 2 * 64 * 4),
    ]  # fmt: skip
    assert backward[9:12] == [("-", 2048), ("-", size), ("-", size)]  # softmax_d, copies


def test_flash_backward_with_grouped_query_heads_expands_dk_dv():
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim:
        q, k, v = qkv(1, 8, 128, 64, h_k=2, grad=True)
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        n_forward = len(events(sim))
        out.backward(torch.ones_like(out))
    expanded = 1 * 128 * 8 * 64 * 2  # dk, dv for all 8 query heads, then summed
    backward = events(sim)[n_forward:]
    assert sim.sdpa_backends == ["flash"]
    assert backward[8:12] == [("+", expanded), ("+", expanded), ("-", expanded), ("-", expanded)]


def test_efficient_attention_in_fp32_and_its_backward():
    # fp32: flash needs fp16/bf16, so the memory-efficient kernel runs
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim:
        q, k, v = qkv(2, 4, 100, 64, dtype=torch.float32, grad=True)
        out = F.scaled_dot_product_attention(q, k, v)
        n_forward = len(events(sim))
        out.backward(torch.ones_like(out))
    size = 2 * 4 * 100 * 64 * 4  # 204,800
    assert sim.sdpa_backends == ["efficient"]
    # res, then the logsumexp padded to 32 queries (kAlignLSE): 2 x 4 x 128 fp32; the seed
    # and offset are host tensors
    assert events(sim)[3:n_forward] == [("+", size), ("+", 2 * 4 * 128 * 4)]
    backward = events(sim)[n_forward:]
    assert backward[:6] == [
        # ones_like(out) keeps out's layout, res (B, M, H, D) transposed: grad_out in
        # BMHK is contiguous already, no copy
        ("+", size),
        ("+", size), ("+", size), ("+", size),  # grad_q, grad_k, grad_v
        ("+", 2 * 4 * 100 * 4), ("-", 2 * 4 * 100 * 4),  # delta (B, H, M) fp32
    ]  # fmt: skip


def test_efficient_attention_without_grad_computes_no_logsumexp():
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim, torch.no_grad():
        q, k, v = qkv(2, 4, 100, 64, dtype=torch.float32)
        F.scaled_dot_product_attention(q, k, v)
    assert events(sim)[3:4] == [("+", 2 * 4 * 100 * 64 * 4)]  # res only (lse: 0 bytes)


def test_efficient_attention_half_with_a_wide_head_uses_an_fp32_accumulator():
    # a T4 (sm 7.5) has no flash; head dim 256 > 128 takes the 32x128 "gmem" kernel
    with memlens.simulate(gpu="t4", cublas_workspace=0) as sim, torch.no_grad():
        q, k, v = qkv(1, 2, 64, 256)
        F.scaled_dot_product_attention(q, k, v)
    size = 1 * 2 * 64 * 256
    assert sim.sdpa_backends == ["efficient"]
    assert events(sim)[3:6] == [("+", size * 2), ("+", size * 4), ("-", size * 4)]


def forced(backend: SDPBackend, gpu: str):
    """The simulation of one forward of (2, 4, 128, 64) fp16 under sdpa_kernel(backend)."""
    with (
        memlens.simulate(gpu=gpu, cublas_workspace=0) as sim,
        torch.no_grad(),
        sdpa_kernel(backend),
    ):
        q, k, v = qkv(2, 4, 128, 64)
        F.scaled_dot_product_attention(q, k, v)
    return sim


def test_cudnn_attention_when_asked_for():
    sim = forced(SDPBackend.CUDNN_ATTENTION, "h100")
    assert sim.sdpa_backends == ["cudnn"]
    assert events(sim)[3:4] == [("+", 2 * 4 * 128 * 64 * 2)]  # out; no stats without grad


def test_math_when_asked_for_materializes_the_scores():
    sim = forced(SDPBackend.MATH, "a100")
    assert sim.sdpa_backends == ["math"]
    assert ("+", 2 * 4 * 128 * 128 * 2) in events(sim)  # the (B, H, S, S) matrix


@pytest.mark.parametrize(
    "gpu, dtype, d, mask, flags, expected",
    [
        ("a100", F16, 64, False, None, "flash"),
        ("a100", torch.bfloat16, 128, False, None, "flash"),
        ("a100", torch.float32, 64, False, None, "efficient"),  # flash: fp16/bf16 only
        ("a100", F16, 64, True, None, "efficient"),  # flash takes no mask
        ("v100", F16, 64, False, None, "efficient"),  # flash: sm80 and newer
        ("a100", F16, 36, False, None, "flash"),  # flash pads the head dim to 40
        ("v100", F16, 36, False, None, "math"),  # 36 % 8: the efficient kernel cannot
        ("a100", F16, 64, False, "no_flash", "efficient"),
        ("a100", F16, 64, False, "math_only", "math"),
        ("a100", F16, 512, False, None, "efficient"),  # flash: head dim at most 256
    ],
)
def test_the_backend_is_cuda_s_choice(gpu, dtype, d, mask, flags, expected):
    with memlens.simulate(gpu=gpu, cublas_workspace=0) as sim, torch.no_grad():
        q, k, v = qkv(2, 4, 64, d, dtype=dtype)
        m = torch.randn(64, 64, device="cuda", dtype=dtype) if mask else None
        if flags == "no_flash":
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
                F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        elif flags == "math_only":
            torch.backends.cuda.enable_flash_sdp(False)
            torch.backends.cuda.enable_mem_efficient_sdp(False)
            try:
                F.scaled_dot_product_attention(q, k, v, attn_mask=m)
            finally:
                torch.backends.cuda.enable_flash_sdp(True)
                torch.backends.cuda.enable_mem_efficient_sdp(True)
        else:
            F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    assert sim.sdpa_backends == [expected]


@pytest.mark.parametrize("grad, expected", [(False, "flash"), (True, "efficient")])
def test_training_with_a_head_dim_over_192_on_an_ada_card_avoids_flash(grad, expected):
    # flash's backward fails for head dims in (192, 224] on sm86/89: not chosen to train
    with memlens.simulate(gpu="l4", cublas_workspace=0) as sim:
        q, k, v = qkv(1, 2, 64, 200, grad=grad)
        F.scaled_dot_product_attention(q, k, v)
    assert sim.sdpa_backends == [expected]


def test_a_boolean_mask_becomes_additive_before_the_kernel():
    # convert_boolean_attn_mask: where(mask, 0, -inf) in the query's dtype; the efficient
    # kernel then takes the (64 x 64, aligned) mask expanded, without a copy
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim, torch.no_grad():
        q, k, v = qkv(2, 4, 64, 64)
        mask = torch.ones(64, 64, dtype=torch.bool, device="cuda")
        n = len(events(sim))
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert sim.sdpa_backends == ["efficient"]
    assert events(sim)[n : n + 6] == [
        ("+", 2),  # scalar_tensor(-inf): one fp16 element
        # where(mask, 0.0, -inf) (where.ScalarSelf) wraps 0.0 on the mask's device too
        ("+", 2),
        ("+", 64 * 64 * 2),  # where(...): the additive fp16 mask
        ("-", 2),  # the wrapped 0.0, when where returns
        ("-", 2),  # -inf, after convert_boolean_attn_mask's where
        ("+", 2 * 4 * 64 * 64 * 2),  # res
    ]


def test_flash_with_dropout_replaces_its_rng_state_and_splits_nothing():
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim, torch.no_grad():
        q, k, v = qkv(1, 8, 1, 128, s_k=4096)  # would split the keys without dropout
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    assert sim.sdpa_backends == ["flash"]
    assert events(sim)[3:9] == [
        ("+", 2048), ("+", 32),  # out, logsumexp: no split-KV with dropout
        ("+", 16), ("+", 8), ("+", 16), ("-", 16),  # rng_state, _unused, rng_state again
    ]  # fmt: skip
    del out


def test_efficient_attention_with_grouped_query_heads_trains():
    # fp32 GQA: the efficient kernel; key and value repeated to the 8 query heads
    with memlens.simulate(gpu="a100", cublas_workspace=0) as sim:
        q, k, v = qkv(1, 8, 64, 64, dtype=torch.float32, h_k=2, grad=True)
        out = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        out.sum().backward()
        assert k.grad is not None and k.grad.shape == (1, 2, 64, 64)
    assert sim.sdpa_backends == ["efficient"]

"""CUDA autocast in simulation follows PyTorch's CUDA cast lists (simulation/patches/autocast.py).

Expected dtypes come from those lists: matmul-like ops in the low dtype, the fp32 list
(exp, log, pow, ...) and fp32_set_opt_dtype ops (sum, softmax, log_softmax, ...) in fp32,
promote ops in the widest input dtype, anything unlisted by ordinary type promotion.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.patches import autocast as lists  # noqa: E402

LOW = [torch.bfloat16, torch.float16]


AUTOCASTS = {  # made inside the simulation: autocast("cuda") asks whether CUDA exists
    "torch.autocast": lambda dtype: torch.autocast("cuda", dtype=dtype),
    "torch.amp.autocast": lambda dtype: torch.amp.autocast(device_type="cuda", dtype=dtype),
    "torch.cuda.amp.autocast": lambda dtype: torch.cuda.amp.autocast(dtype=dtype),
}


def dtypes_under_autocast(ctx) -> dict[str, Any]:
    x = torch.randn(4, 8, device="cuda")
    w = torch.nn.Parameter(torch.randn(8, 8, device="cuda"))
    with ctx:
        h = x @ w
        return {
            "matmul": h.dtype,
            "mm": torch.mm(x, w).dtype,
            "linear": torch.nn.functional.linear(x, w).dtype,
            "einsum": torch.einsum("ij,jk->ik", x, w).dtype,
            "bmm": torch.bmm(x[None], w[None]).dtype,
            "exp": torch.exp(h).dtype,
            "log": torch.log(h).dtype,
            "pow": h.pow(2).dtype,
            "rsqrt": h.rsqrt().dtype,
            "sum": h.sum().dtype,
            "sum_dim": h.sum(-1).dtype,
            "softmax": h.softmax(-1).dtype,
            "log_softmax": torch.log_softmax(h, -1).dtype,
            "sum_explicit_dtype": h.sum(dtype=torch.float16).dtype,  # the caller's wins
            "norm": h.norm().dtype,  # fp32_append_dtype
            "add": (h + h).dtype,  # not listed: stays low
            "relu": torch.relu(h).dtype,
            "addcmul": torch.addcmul(h, h, x).dtype,  # promote: fp32 wins
            "cat": torch.cat([h, x]).dtype,  # CPU autocast promotes cat; CUDA does not list it
            "mse_loss": torch.nn.functional.mse_loss(h, h).dtype,
        }


@pytest.mark.filterwarnings("ignore:`torch.cuda.amp.autocast")
@pytest.mark.parametrize("spelling", list(AUTOCASTS))
@pytest.mark.parametrize("dtype", LOW)
def test_dtypes_follow_the_cuda_lists(dtype, spelling):
    with memlens.simulate():
        got = dtypes_under_autocast(AUTOCASTS[spelling](dtype))
    f32 = torch.float32
    assert got == {
        "matmul": dtype, "mm": dtype, "linear": dtype, "einsum": dtype, "bmm": dtype,
        "exp": f32, "log": f32, "pow": f32, "rsqrt": f32, "sum": f32, "sum_dim": f32,
        "softmax": f32, "log_softmax": f32, "sum_explicit_dtype": torch.float16,
        "norm": f32, "add": dtype, "relu": dtype, "addcmul": f32, "cat": f32,
        "mse_loss": f32,
    }  # fmt: skip


def test_the_exp_chain_of_a_hand_written_softmax_allocates_in_fp32():
    with memlens.simulate() as sim:
        x = torch.randn(2, 4, 64, 64, device="cuda")
        w = torch.randn(64, 64, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            s = x @ w  # bf16: 2*4*64*64*2 bytes
            e = torch.exp(s - s.max(-1, keepdim=True).values)
            p = e / e.sum(-1, keepdim=True)
        assert (s.dtype, e.dtype, p.dtype) == (torch.bfloat16, torch.float32, torch.float32)
    n = 2 * 4 * 64 * 64
    assert sim.snapshot is not None
    sizes = [e["size"] for e in sim.snapshot["device_traces"][0] if e["action"] == "alloc"]
    # fp32: x, exp's fp32 copy of its bf16 input, exp's result, p (fp32 / fp32)
    assert sizes.count(4 * n) == 4
    # bf16: matmul's copy of x, s, s - max (sub is on no list: stays bf16)
    assert sizes.count(2 * n) == 3


def test_weight_casts_are_cached_until_the_outermost_autocast_exits():
    with memlens.simulate() as sim:
        lin = torch.nn.Linear(256, 256, bias=False, device="cuda")
        x = torch.randn(8, 256, device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            lin(x)
            lin(x)
            with torch.autocast("cuda", dtype=torch.float16):
                lin(x)
            cached = torch.cuda.memory_allocated()
        after = torch.cuda.memory_allocated()
    weight_fp16 = 256 * 256 * 2
    assert sim.snapshot is not None
    casts = [
        e for e in sim.snapshot["device_traces"][0]
        if e["action"] == "alloc" and e["size"] == weight_fp16
    ]  # fmt: skip
    assert len(casts) == 1  # one cached copy for three calls
    assert cached - after == weight_fp16  # dropped at the outer exit


WEIGHT_FP16 = 256 * 256 * 2  # one nn.Linear(256, 256) weight cast to fp16


def weight_casts(grad_mode, calls: int = 3, registered: bool = False) -> tuple[list[str], int]:
    """The weight casts' alloc / free entries over `calls` calls under autocast and
    `grad_mode`, and the bytes the cast cache still holds just before autocast exits."""
    with memlens.simulate() as sim:
        lin = torch.nn.Linear(256, 256, bias=False, device="cuda")
        x = torch.randn(8, 256, device="cuda")
        if registered:  # at::caching's registry (CUDA graph trees): never cached
            torch._C._set_cached_tensors_enabled(True)
            torch._C._add_cached_tensor(lin.weight)
        try:
            with torch.autocast("cuda", dtype=torch.float16):
                with grad_mode():
                    for _ in range(calls):
                        y = lin(x)
                del y
                inside = torch.cuda.memory_allocated()
            held = inside - torch.cuda.memory_allocated()
        finally:
            if registered:
                torch._C._remove_cached_tensor(lin.weight)
                torch._C._set_cached_tensors_enabled(False)
    assert sim.snapshot is not None
    trace = sim.snapshot["device_traces"][0]
    actions = [
        e["action"] for e in trace if e["size"] == WEIGHT_FP16 and e["action"] != "free_requested"
    ]
    return actions, held


def test_under_inference_mode_each_call_casts_afresh_and_frees_after_its_matmul():
    # cached_cast's `!c10::InferenceMode::is_enabled()`: nothing is cached, so each
    # call's cast dies with the op (the GPU frees it a few events after the matmul)
    actions, held = weight_casts(torch.inference_mode)
    assert actions == ["alloc", "free_completed"] * 3
    assert held == 0


def test_under_no_grad_the_weight_cast_is_cached_until_autocast_exits():
    actions, held = weight_casts(torch.no_grad)
    assert actions == ["alloc", "free_completed"]  # one cast, freed at the outer exit
    assert held == WEIGHT_FP16


def test_a_registered_cached_tensor_is_not_cast_cached():
    actions, held = weight_casts(torch.no_grad, registered=True)
    assert actions == ["alloc", "free_completed"] * 3
    assert held == 0


def test_a_cast_cached_under_no_grad_still_carries_the_weights_gradient():
    # PyTorch casts for the cache with grad mode on: a later training call reusing it
    # reaches the weight, whose gradient (256 x 256 fp32) is then allocated
    with memlens.simulate() as sim:
        lin = torch.nn.Linear(256, 256, bias=False, device="cuda")
        x = torch.randn(8, 256, device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            with torch.no_grad():
                lin(x)
            y = lin(x)
        y.float().sum().backward()
        assert lin.weight.grad is not None
    assert sim.snapshot is not None
    sizes = [e["size"] for e in sim.snapshot["device_traces"][0] if e["action"] == "alloc"]
    # fp16: the cast and its gradient (mm's backward); fp32: the weight and its gradient
    assert sizes.count(WEIGHT_FP16) == 2 and sizes.count(256 * 256 * 4) == 2


def test_autocast_off_inside_and_cpu_tensors_are_left_alone():
    with memlens.simulate():
        x = torch.randn(4, 4, device="cuda")
        c = torch.randn(4, 4)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert (c @ c).dtype == torch.float32  # CUDA autocast casts CUDA tensors only
            with torch.autocast("cuda", enabled=False):
                assert (x @ x).dtype == torch.float32
        assert (x @ x).dtype == torch.float32


def test_binary_cross_entropy_is_refused_as_on_a_gpu():
    with memlens.simulate():
        p = torch.rand(4, device="cuda")
        with (
            torch.autocast("cuda", dtype=torch.float16),
            pytest.raises(RuntimeError, match="unsafe to autocast"),
        ):
            torch.nn.functional.binary_cross_entropy(p, p)


def test_lists_match_the_installed_pytorch_header():
    header = Path(torch.__file__).parent / "include" / "ATen" / "autocast_mode.h"
    if not header.exists():
        pytest.skip("this PyTorch install has no C++ headers")
    text = header.read_text()

    def macro(name: str) -> set[tuple[str, str]]:
        body = re.search(rf"#define {name}\(_\)(.*?)\n\n", text, re.S)
        assert body is not None, name
        entries = re.findall(r"_\((\w+)(?:,\s*(\w+))?\)", body.group(1))
        return {(op, overload) for op, overload in entries}

    cudnn = {("cudnn_convolution", ""), ("cudnn_convolution_transpose", "")}
    assert macro("AT_FORALL_LOWER_PRECISION_FP") == set(lists.LOWER_PRECISION_FP) - cudnn
    assert macro("AT_FORALL_FP32") == set(lists.FP32)
    assert macro("AT_FORALL_FP32_SET_OPT_DTYPE") == set(lists.FP32_SET_OPT_DTYPE)
    assert macro("AT_FORALL_PROMOTE") == set(lists.PROMOTE)
    for op, overload in lists.FP32_APPEND_DTYPE:
        assert f'"{op}.{overload}"' in text


def test_cpu_autocast_is_itself_again_after_the_simulation():
    with memlens.simulate():
        pass
    x = torch.randn(4, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.mm(x, x).dtype == torch.bfloat16
        assert torch.exp(x.bfloat16()).dtype == torch.bfloat16  # CPU does not list exp
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::exp", "AutocastCPU")

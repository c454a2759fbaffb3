"""`torch.compile` under simulation (memlens.simulation.patches.torch_compile, .inductor_plan).

The sizes are worked out by hand from Inductor's rules: pointwise ops fuse into one kernel
with one output buffer; a GEMM's output is a buffer that a following pointwise kernel
updates in place; AOTAutograd's min-cut partition saves the GEMM output and recomputes
the cheap sigmoid in backward, where eager autograd keeps both. Every tensor here is
64 x 64 fp32: 16,384 bytes. The cuBLAS workspace is switched off to keep the traces short.
"""

from __future__ import annotations

import gc
import os
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from torch import Tensor, nn  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.patches import cudagraph_trees  # noqa: E402
from memlens.simulation.patches.triton_autotune import made_by_autotuning  # noqa: E402

pytestmark = pytest.mark.slow  # Dynamo and Inductor's imports: seconds per test
SIZE = 64 * 64 * 4


def events(sim) -> list[tuple[str, int]]:
    snapshot = sim.snapshot or sim.build_snapshot()
    return [
        ("+" if e["action"] == "alloc" else "-", e["size"])
        for e in snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_completed") and not made_by_autotuning(e)
    ]  # autotuning's buffers: test_simulate_triton_autotune.py


def chain(x: Tensor) -> Tensor:
    return ((x * 2).sin() + 1).relu()


def gemms(x: Tensor, w: Tensor) -> Tensor:
    out: Tensor = torch.relu(x @ w) @ w
    return out


def gated(x: Tensor, w: Tensor) -> Tensor:
    y = x @ w  # the line the saved buffer's stack names
    out: Tensor = (torch.sigmoid(y) * y).sum()
    return out


def test_a_pointwise_chain_is_one_kernel_with_one_buffer():
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        x = torch.randn(64, 64, device="cuda")
        eager_events = len(events(sim))
        chain(x)  # eager: three temporaries, each freed by the next op
        assert len(events(sim)) - eager_events == 8
        before = len(events(sim))
        y = torch.compile(chain)(x)
    assert events(sim)[before:] == [("+", SIZE)]  # the output, nothing else
    assert y.shape == (64, 64) and y.device.type == "cuda"
    assert any(n.startswith("torch.compile: Dynamo's graphs") for n in sim.notes)


def test_a_pointwise_kernel_after_a_gemm_updates_its_buffer_in_place():
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        x, w = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
        torch.compile(gemms)(x, w)
    assert events(sim) == [
        ("+", SIZE), ("+", SIZE),  # x, w
        ("+", SIZE),  # x @ w; relu writes into it
        ("+", SIZE),  # relu(...) @ w, the output
        ("-", SIZE),  # the relu buffer, after its last reader; the output is dropped later
        ("-", SIZE),  # the output (the call's result is not kept)
    ]  # fmt: skip
    assert sim.snapshot is not None
    trace = [e for e in sim.snapshot["device_traces"][0] if not made_by_autotuning(e)]
    allocs = [e for e in trace if e["action"] == "alloc"]
    frees = [e for e in trace if e["action"] == "free_completed"]
    assert frees[0]["addr"] == allocs[2]["addr"]  # the in-place buffer is the GEMM's


def test_the_min_cut_partition_saves_less_than_eager_autograd():
    def forward_memory(compiled: bool) -> tuple[int, list[dict[str, Any]]]:
        with memlens.simulate(cublas_workspace=0) as sim:
            x = torch.randn(64, 64, device="cuda")
            w = torch.randn(64, 64, device="cuda", requires_grad=True)
            start = torch.cuda.memory_allocated()
            fn = torch.compile(gated) if compiled else gated
            loss = fn(x, w)
            after_forward = torch.cuda.memory_allocated() - start
            loss.backward()
            assert w.grad is not None and w.grad.shape == (64, 64)
            del loss
        assert sim.snapshot is not None
        return after_forward, sim.snapshot["device_traces"][0]

    eager, _ = forward_memory(False)
    compiled, trace = forward_memory(True)
    scalar = 512  # the loss: 4 bytes in one 512-byte block
    assert eager == 2 * SIZE + scalar  # y and sigmoid(y), kept for backward
    assert compiled == SIZE + scalar  # y only: backward recomputes sigmoid(y)
    x_alloc, w_alloc, saved = [e for e in trace if e["action"] == "alloc" and e["size"] == SIZE][:3]
    first = saved["frames"][0]  # the user's line, as PyTorch records Inductor's buffers
    assert first["filename"] == __file__ and first["name"] == "gated"
    assert first["line"] == gated.__code__.co_firstlineno + 1


def two_reductions(*inputs):
    total = sum(inputs[1:], inputs[0])  # one pointwise value reading every input
    return total.sum(0), total.amax(0)  # used twice


@pytest.mark.parametrize("n_inputs", [4, 5])
def test_a_value_used_twice_is_stored_only_when_it_reads_more_than_four_buffers(n_inputs):
    # Inductor's should_realize_on_reuse: 2 users and num_reads > realize_reads_threshold
    # (4); otherwise each reduction recomputes it from the inputs
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        inputs = [torch.randn(64, 64, device="cuda") for _ in range(n_inputs)]
        start = len(events(sim))
        outputs = torch.compile(two_reductions)(*inputs)
    stored = [("+", SIZE)] if n_inputs > 4 else []
    freed = [("-", SIZE)] if n_inputs > 4 else []
    # the two (64,) fp32 results: 256 bytes each
    assert events(sim)[start:] == stored + [("+", 256), ("+", 256)] + freed
    assert [o.shape for o in outputs] == [(64,), (64,)]


class Gemms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 64))

    def forward(self, x: Tensor) -> Tensor:
        return gemms(x, self.w)


def test_module_compile_with_cuda_graphs_warms_up_in_the_trees_pool():
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        model = Gemms().cuda()
        model.compile(mode="reduce-overhead")
        start = len(events(sim))
        out = model(torch.randn(64, 64, device="cuda"))
        assert out.shape == (64, 64)
    # x; the tree's empty capture (the CUDA generator's two 8-byte blocks); then the
    # warm-up as above, in the tree's pool: the GEMM buffer (relu in place), the output,
    # the relu buffer freed, then x (patches/cudagraph_trees.py)
    assert (
        events(sim)[start:]
        == [("+", SIZE), ("+", 8), ("+", 8)] + [("+", SIZE)] * 2 + [("-", SIZE)] * 2
    )
    assert sim.snapshot is not None
    assert {tuple(s["segment_pool_id"]) for s in sim.snapshot["segments"]} == {(0, 0), (0, 1)}
    assert cudagraph_trees.NOTE in sim.notes
    assert any(n.startswith("torch.compile: Dynamo's graphs") for n in sim.notes)


def test_a_second_simulation_compiles_afresh():
    # Dynamo caches compiled code per code object; a cache entry made for the first
    # simulation's fakes must not serve the second.
    runs = []
    for _ in range(2):
        with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
            x = torch.randn(64, 64, device="cuda")
            torch.compile(chain)(x)
        runs.append(events(sim))
    assert runs[0] == runs[1] == [("+", SIZE), ("+", SIZE), ("-", SIZE)]


@pytest.mark.skipif(
    not os.environ.get("MEMLENS_SLOW_SIMULATIONS"),
    reason="compiling the 3.4B-parameter model takes ~45 s CPU: set MEMLENS_SLOW_SIMULATIONS=1",
)
def test_the_compiled_cs336_forward_matches_its_gpu_recording(expected_figures):
    """../shared/snapshots/cs336_compiled_ctx128_forward.pickle: `torch.compile(model)`,
    compiled inside the recorded window, one forward with autograd on. Its peak is at the
    end: the parameters plus what the forward graph saves for backward and the logits."""
    from cs336_model import run  # beside this file: on sys.path under pytest

    with memlens.simulate() as sim:
        keep = run(128, fullstep=False, compiled=True)
    del keep
    gc.collect()
    sim_figures = memlens.load(sim.snapshot).device(0)
    real = expected_figures["cs336_compiled_ctx128_forward.pickle"]
    assert sim_figures.baseline_bytes == real["baseline_bytes"]
    # measured: -0.030 %: one (4, 128, 2560) fp32 buffer (5 MiB) fewer saved, by the
    # rebuilt model's final RMSNorm (the original's keeps two for backward)
    assert sim_figures.peak_active_bytes / real["peak_active_bytes"] - 1 == pytest.approx(
        -5 * 2**20 / real["peak_active_bytes"], abs=1e-4
    )
    assert sim_figures.peak_reserved_bytes == pytest.approx(real["peak_reserved_bytes"], rel=0.005)
    assert any(n.startswith("torch.compile: Dynamo's graphs") for n in sim.notes)

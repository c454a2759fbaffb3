"""CUDA-only calls scripts make do not stop a simulation (issue 13), nvtx ranges become
annotations, --gpu presets, inference_mode decomposition, and the CLI's failure path."""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import textwrap
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.gpus import OLDER_WORKSPACE, gpu_preset  # noqa: E402
from memlens.simulation.patches import cudagraph_trees  # noqa: E402
from memlens.simulation.patches import torch_compile as compiled  # noqa: E402

MiB = 2**20


def stages(sim) -> list[tuple[str, str]]:
    return [(a["name"], a["stage"]) for a in sim.snapshot["external_annotations"]]


def test_nvtx_ranges_become_annotations():
    @torch.cuda.nvtx.range("decorated")
    def f(x):
        return x * 2

    with memlens.simulate() as sim:
        x = torch.ones(4, device="cuda")
        with torch.cuda.nvtx.range("block {}", 1):
            f(x)
        torch.cuda.nvtx.range_push("pushed")
        torch.cuda.nvtx.mark("a mark")
        assert torch.cuda.nvtx.range_pop() == 0
        torch.cuda.nvtx.range_end(torch.cuda.nvtx.range_start("started"))
    assert stages(sim) == [
        ("block 1", "START"), ("decorated", "START"), ("decorated", "END"), ("block 1", "END"),
        ("pushed", "START"), ("pushed", "END"), ("started", "START"), ("started", "END"),
    ]  # fmt: skip


def test_nvtx_annotations_can_be_left_out():
    with (
        memlens.simulate(nvtx_annotations=False) as sim,
        torch.cuda.nvtx.range("r"),
        torch.autograd.profiler.record_function("kept"),
    ):
        torch.ones(4, device="cuda")
    assert stages(sim) == [("kept", "START"), ("kept", "END")]


def test_synchronize_events_and_streams():
    with memlens.simulate():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            y = torch.ones(4, device="cuda") * 2
        torch.cuda.current_stream().wait_stream(side)
        end.record()
        end.wait()
        end.synchronize()
        torch.cuda.synchronize()
        assert start.elapsed_time(end) == 0.0
        assert y.shape == (4,)


def test_each_stream_has_its_own_free_blocks():
    # 4 MiB blocks come from the large pool, in 20 MiB segments. A block freed on the
    # side stream is reused by the side stream alone, as CUDACachingAllocator keys its
    # free blocks by stream: the default stream's request needs a segment of its own.
    with memlens.simulate() as sim:
        side = torch.cuda.Stream()
        assert torch.cuda.current_stream() == torch.cuda.default_stream() != side
        with torch.cuda.stream(side):
            assert torch.cuda.current_stream() == side
            x = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")
        del x
        y = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")  # a new segment
        reserved = torch.cuda.memory_reserved()
        with side:  # torch.Stream as a context manager
            z = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda")  # x's block again
        assert torch.cuda.memory_reserved() == reserved == 2 * 20 * MiB
        del y, z
    snapshot = sim.snapshot
    assert snapshot is not None
    trace = snapshot["device_traces"][0]
    allocs = [(e["stream"], e["addr"]) for e in trace if e["action"] == "alloc"]
    assert [stream for stream, _ in allocs] == [1, 0, 1]
    assert allocs[0][1] == allocs[2][1] != allocs[1][1]
    assert sorted(seg["stream"] for seg in snapshot["segments"]) == [0, 1]


@pytest.fixture
def restore_backend_flags():
    """The flags are process-wide: a test that sets them leaves them for every later test in
    the same worker (Lightning then refused to start: mixed legacy/new matmul precision)."""
    precision = torch.get_float32_matmul_precision()
    cudnn = (torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    flash = torch.backends.cuda.flash_sdp_enabled()
    yield
    torch.set_float32_matmul_precision(precision)
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = cudnn
    torch.backends.cuda.enable_flash_sdp(flash)
    assert torch.get_float32_matmul_precision() == precision


def test_backend_flags_device_queries_and_stats(restore_backend_flags):
    with memlens.simulate(gpu="t4"):
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.enable_flash_sdp(True)
        torch.set_float32_matmul_precision("high")
        assert torch.cuda.get_device_name() == "Tesla T4"
        assert torch.cuda.get_device_capability(0) == (7, 5)
        assert not torch.cuda.is_bf16_supported()  # Turing has no bf16
        x = torch.ones(1024, device="cuda")
        assert torch.cuda.memory_stats()["allocated_bytes.all.current"] == 4096
        with torch.cuda.device(0):
            assert x.device.type == "cuda"
        torch.cuda.set_rng_state(torch.cuda.get_rng_state())


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_cuda_amp_grad_scaler_and_autocast():
    with memlens.simulate():
        w = torch.nn.Parameter(torch.ones(8, 8, device="cuda"))
        opt = torch.optim.SGD([w], lr=0.1)
        scaler = torch.cuda.amp.GradScaler()
        with torch.cuda.amp.autocast():
            loss = (w @ w).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        assert w.grad is not None and w.grad.dtype == torch.float32


def test_torch_compile_is_modelled_with_a_note():
    # memlens.simulation.patches.torch_compile; its memory is tested in test_simulate_compiled.py
    with memlens.simulate() as sim:
        lin = torch.compile(torch.nn.Linear(4, 4, device="cuda"))
        double = torch.compile(lambda t: t * 2)

        @torch.compile(mode="reduce-overhead")
        def triple(t):
            return t * 3

        x = torch.ones(2, 4, device="cuda")
        assert lin(x).shape == (2, 4) and double(x).shape == triple(x).shape == (2, 4)
    assert sim.notes == [
        compiled.NOTE,  # no autotuning note: kernels of 8 elements have one config
        cudagraph_trees.NOTE,  # reduce-overhead's graph, compiled at its first call
    ]


def test_gpu_presets_set_workspace_and_memory():
    with memlens.simulate(gpu="ampere") as sim:
        torch.ones(4, 4, device="cuda") @ torch.ones(4, 4, device="cuda")
        assert torch.cuda.mem_get_info()[1] == gpu_preset("a100").memory
    assert sim.snapshot is not None
    sizes = [e["size"] for e in sim.snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert OLDER_WORKSPACE in sizes and 32 * MiB not in sizes
    assert gpu_preset("Hopper").cublas_workspace == 32 * MiB
    with pytest.raises(memlens.MemlensError, match="unknown GPU 'x'"):
        memlens.simulate(gpu="x")


def test_inference_mode_decomposes_einsum_so_its_gemm_and_autocast_apply():
    with memlens.simulate(cublas_workspace="8MiB") as sim, torch.inference_mode():
        a = torch.ones(4, 16, 8, device="cuda")
        b = torch.ones(4, 8, 16, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = torch.einsum("bij,bjk->bik", a, b)
        assert out.dtype == torch.bfloat16
    assert sim.snapshot is not None
    sizes = [e["size"] for e in sim.snapshot["device_traces"][0] if e["action"] == "alloc"]
    # a, b, their bf16 copies, the result of the bmm inside einsum, then its workspace
    assert sizes == [4 * 16 * 8 * 4, 4 * 8 * 16 * 4, 4 * 16 * 8 * 2, 4 * 8 * 16 * 2,
                     4 * 16 * 16 * 2, 8 * MiB]  # fmt: skip


def test_early_blocks_have_no_stacks_unless_asked():
    def run(**kw: Any) -> tuple[dict[str, Any], dict[int, Any]]:
        with memlens.simulate(**kw) as sim:
            early = torch.ones(256, device="cuda")
            torch.cuda.memory._record_memory_history(max_entries=1000)
            late = torch.ones(256, device="cuda")
        assert sim.snapshot is not None
        frames = {b["size"]: b["frames"] for s in sim.snapshot["segments"] for b in s["blocks"]
                  if b["state"] == "active_allocated"}  # fmt: skip
        del early, late
        return sim.snapshot, frames

    snap, _ = run()
    blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert [bool(b["frames"]) for b in blocks] == [False, True]
    snap, _ = run(early_stacks=True)
    blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert [bool(b["frames"]) for b in blocks] == [True, True]


def simulate_cli(tmp_path, source: str, *extra: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "-o", str(tmp_path / "out.pickle"),
         *extra, str(script)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(
    "source, error",
    [
        ("def f(:\n", "SyntaxError"),
        ("import no_such_module_here\n", "ModuleNotFoundError: No module named"),
        ("import sys\nsys.exit(3)\n", "exited with code 3"),
    ],
)
def test_a_script_failing_before_any_allocation_leaves_no_snapshot(tmp_path, source, error):
    done = simulate_cli(tmp_path, source)
    assert done.returncode == 1
    assert not (tmp_path / "out.pickle").exists()
    assert "memlens/" not in done.stderr and "runpy" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("memlens: ") and "no snapshot written" in last and error in done.stderr


def test_a_failing_script_writes_the_run_up_to_the_failure(tmp_path):
    done = simulate_cli(
        tmp_path,
        """
        import torch
        x = torch.ones(1024, device="cuda")  # 4 KiB: one 512-rounded block of a 2 MiB segment
        y = x * 2
        raise ValueError("boom")
        """,
    )
    assert done.returncode == 1
    assert "memlens/" not in done.stderr and "runpy" not in done.stderr
    assert 'raise ValueError("boom")' in done.stderr  # the script's own traceback
    out = tmp_path / "out.pickle"
    assert done.stderr.strip().splitlines()[-1] == (
        f"memlens: {tmp_path / 'script.py'} failed (ValueError: boom); "
        f"the snapshot up to the failure is in {out}"
    )
    trace = pickle.loads(out.read_bytes())["device_traces"][0]
    assert [(e["action"], e["size"]) for e in trace] == [
        ("segment_alloc", 2 * MiB), ("alloc", 4096), ("alloc", 4096),
    ]  # fmt: skip


def test_the_output_is_the_scripts_own_dump_when_it_makes_one(tmp_path):
    done = simulate_cli(
        tmp_path,
        """
        import torch
        keep = torch.ones(2**20, device="cuda")
        torch.cuda.memory._record_memory_history()
        big = torch.ones(2**28, device="cuda")  # 1 GiB, alive at the dump
        torch.cuda.memory._dump_snapshot("own.pickle")
        del big
        """,
        "--gpu", "a100",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    own = (tmp_path / "own.pickle").read_bytes()
    assert (tmp_path / "out.pickle").read_bytes() == own
    assert "predicted peak active 1.00 GiB" in done.stderr
    assert (
        "simulating NVIDIA A100-SXM4-80GB (sm 8.0): cuBLAS workspace 8,519,680 bytes "
        "(8.125 MiB) per thread, device memory 80.00 GiB\n" in done.stderr
    )
    assert pickle.loads(own)["device_traces"][0][0]["action"] == "segment_alloc"


def test_numpy_of_fake_tensors_is_zeros_as_on_the_host():
    """`.numpy()` of a fake host tensor gives zeros of its shape and dtype (noted); a fake
    CUDA tensor and bfloat16 are refused as torch refuses them."""
    import numpy as np

    with memlens.simulate() as sim:
        x = torch.ones(2, 3, device="cuda")
        with pytest.raises(TypeError, match="cuda:0 device type tensor"):
            x.numpy()
        host = (x * 2).cpu()
        got = host.numpy()
        assert got.shape == (2, 3) and got.dtype == np.float32 and not got.any()
        assert host.to(torch.int64).numpy().dtype == np.int64
        with pytest.raises(TypeError, match="BFloat16|bfloat16"):
            host.to(torch.bfloat16).numpy()
    assert "tensor values are fake: .numpy() answered zeros" in sim.notes
    assert torch.ones(2).numpy().tolist() == [1.0, 1.0]  # restored afterwards


@pytest.mark.parametrize(
    "flags, first_line",
    [
        (("--gpu", "rtx4090"), "NVIDIA GeForce RTX 4090 (sm 8.9): cuBLAS workspace 8,519,680 "
         "bytes (8.125 MiB) per thread, device memory 23.99 GiB"),
        (("--cublas-workspace", "32MiB", "--device-memory", "23.5GiB"),
         "NVIDIA H100 80GB HBM3 (sm 9.0): cuBLAS workspace 33,554,432 bytes (32.000 MiB) per "
         "thread, device memory 23.50 GiB; --gpu NAME for another card"),
    ],
)  # fmt: skip
def test_the_first_line_prints_sizes_in_units(tmp_path, flags, first_line):
    # 24,564 MiB = 23.99 GiB (not 25757220864 bytes); "32MiB" is not "32MiB bytes"
    done = simulate_cli(tmp_path, "pass\n", *flags)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == f"memlens: simulating {first_line}"


def test_torch_compile_wrapped_by_a_deep_copying_wrapper(monkeypatch):
    # Lightning (imported by its callback's tests, in the same process) replaces
    # torch.compile by a wrapper that deep-copies the call's arguments onto the module; the
    # simulation's backend rides in those arguments and must survive the copy
    real = torch.compile

    def capture(model, **kwargs):
        compiled = real(model, **kwargs)
        compiled._kwargs_seen = copy.deepcopy(kwargs)
        return compiled

    monkeypatch.setattr(torch, "compile", capture)
    with memlens.simulate():
        lin = torch.compile(torch.nn.Linear(4, 4, device="cuda"))
        assert lin(torch.ones(2, 4, device="cuda")).shape == (2, 4)
    assert lin._kwargs_seen["backend"] is not None

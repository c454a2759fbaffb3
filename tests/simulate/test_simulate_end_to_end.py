"""memlens.simulate on small models: exact snapshots, torch.cuda answers, OOM, CLI."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.analysis.allocator_model import BASE_ADDRESS as B  # noqa: E402

MiB = 2**20


def trace_of(sim) -> list[tuple[str, int, int]]:
    return [(e["action"], e["addr"] - B, e["size"]) for e in sim.snapshot["device_traces"][0]]


def replay_live(snapshot: dict[str, Any]) -> dict[int, int]:
    """Blocks alive at the end of the trace, replaying alloc / free_completed."""
    live: dict[int, int] = {}
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    return live


def active_blocks(snapshot: dict[str, Any]) -> dict[int, int]:
    return {
        b["address"]: b["requested_size"]
        for s in snapshot["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    }


def test_linear_forward_exact_snapshot():
    with memlens.simulate() as sim:
        lin = torch.nn.Linear(256, 512, device="cuda")
        x = torch.zeros(8, 256, device="cuda")
        y = lin(x)
        assert y.device == torch.device("cuda", 0) and y.is_cuda
        del y
    # each segment lies below the one before, as a GPU's cudaMalloc mostly places them
    small_at, large_at = -2 * MiB, -2 * MiB - 32 * MiB
    assert trace_of(sim) == [
        ("segment_alloc", small_at, 2 * MiB),
        ("alloc", small_at, 512 * 256 * 4),  # weight
        ("alloc", small_at + 524288, 512 * 4),  # bias
        ("alloc", small_at + 526336, 8 * 256 * 4),  # x
        ("alloc", small_at + 534528, 8 * 512 * 4),  # y = addmm(...)
        ("segment_alloc", large_at, 32 * MiB),  # cuBLAS workspace, first GEMM
        ("alloc", large_at, 32 * MiB),
        # addmm with a 1-D bias runs cuBLASLt's gemm_and_bias: its 1 MiB workspace
        ("alloc", small_at + 550912, MiB),
        ("free_requested", small_at + 534528, 16384),  # del y
        ("free_completed", small_at + 534528, 16384),
    ]
    assert sim.snapshot is not None
    large, small = sim.snapshot["segments"]  # by address, as PyTorch lists them
    assert [(b["size"], b["state"]) for b in small["blocks"]] == [
        (524288, "active_allocated"),
        (2048, "active_allocated"),
        (8192, "active_allocated"),
        (16384, "inactive"),
        (MiB, "active_allocated"),
        (2 * MiB - 550912 - MiB, "inactive"),
    ]
    assert large["total_size"] == 32 * MiB and large["segment_type"] == "large"
    assert lin.weight.device.type == "cuda"  # still a fake CUDA tensor
    assert not torch.cuda.is_available()  # everything restored


def test_stacks_are_user_frames_innermost_first():
    with memlens.simulate(cublas_workspace=0) as sim:
        t = torch.empty(100, device="cuda")  # THIS LINE
    assert sim.snapshot is not None
    (seg_alloc, alloc) = sim.snapshot["device_traces"][0]
    top = alloc["frames"][0]
    assert (
        top["filename"] == __file__ and top["name"] == "test_stacks_are_user_frames_innermost_first"
    )
    source = Path(__file__).read_text().splitlines()
    assert "THIS LINE" in source[top["line"] - 1]
    assert all("_subclasses" not in f["filename"] for f in alloc["frames"])
    assert seg_alloc["frames"] is alloc["frames"]  # shared, as PyTorch's pickles share them
    del t


def test_cuda_queries_follow_the_model_and_module_to_cuda_works():
    with memlens.simulate(cublas_workspace=0):
        assert torch.cuda.is_available() and torch.cuda.device_count() == 1
        model = torch.nn.Linear(1024, 1024)  # built on the (fake) CPU, then moved
        model.cuda()
        assert model.weight.is_cuda
        assert torch.cuda.memory_allocated() == 1024 * 1024 * 4 + 4096
        assert torch.cuda.memory_reserved() == 20 * MiB + 2 * MiB
        x = torch.randn(4, 1024).to("cuda")
        model(x).sum().backward()
        assert model.weight.grad.is_cuda
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() < peak
        torch.cuda.synchronize()


def test_training_step_end_state_equals_active_blocks():
    with memlens.simulate() as sim:
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
        ).cuda()
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(2):
            opt.zero_grad()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(
                    model(torch.randn(32, 64, device="cuda")),
                    torch.randint(0, 10, (32,), device="cuda"),
                )
            loss.backward()
            opt.step()
        torch.cuda.empty_cache()
    snap = sim.snapshot
    assert snap is not None
    assert replay_live(snap) == active_blocks(snap)
    names = [(a["name"], a["stage"]) for a in snap["external_annotations"]]
    assert names[:2] == [
        ("Optimizer.zero_grad#AdamW.zero_grad", "START"),
        ("Optimizer.zero_grad#AdamW.zero_grad", "END"),
    ]
    assert ("Optimizer.step#AdamW.step", "END") in names
    dev = memlens.load(snap).device(0)
    assert dev.n_events == len(snap["device_traces"][0])
    assert dev.baseline_bytes == 0


def test_autocast_cuda_gives_bf16_matmuls():
    with memlens.simulate(cublas_workspace=0):
        lin = torch.nn.Linear(32, 32, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            assert lin(torch.empty(2, 32, device="cuda")).dtype == torch.bfloat16
        assert lin(torch.empty(2, 32, device="cuda")).dtype == torch.float32


def test_oom_raises_and_is_recorded(tmp_path):
    out = tmp_path / "oom.pickle"
    oom_error = pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 100.00 MiB")
    with oom_error, memlens.simulate(out, device_memory="64MiB", cublas_workspace=0):
        keep = torch.empty(10 * MiB // 4, device="cuda")
        torch.empty(100 * MiB // 4, device="cuda")
    snap = pickle.loads(out.read_bytes())
    oom = snap["device_traces"][0][-1]
    assert oom["action"] == "oom" and oom["size"] == 100 * MiB
    assert oom["device_free"] == 64 * MiB - 10 * MiB  # only the 10 MiB segment stays
    del keep


def test_record_history_window_and_dump(tmp_path):
    dumped = tmp_path / "dump.pickle"
    with memlens.simulate(cublas_workspace=0) as sim:
        before = torch.empty(1000, device="cuda")
        torch.cuda.memory._record_memory_history(max_entries=100000)
        with torch.profiler.record_function("phase"):
            after = torch.empty(3000, device="cuda")
        torch.cuda.memory._dump_snapshot(str(dumped))
        torch.cuda.memory._record_memory_history(enabled=None)
        torch.empty(5000, device="cuda")  # not recorded
    assert sim.snapshot is not None
    assert [e["size"] for e in sim.snapshot["device_traces"][0]] == [12000]
    assert [(a["name"], a["stage"]) for a in sim.snapshot["external_annotations"]] == [
        ("phase", "START"),
        ("phase", "END"),
    ]
    assert pickle.loads(dumped.read_bytes())["device_traces"][0][0]["size"] == 12000
    del before, after


def test_expandable_segments_option():
    with memlens.simulate(expandable_segments=True, cublas_workspace=0) as sim:
        a = torch.empty(3 * MiB // 4, device="cuda")
        b = torch.empty(18 * MiB // 4, device="cuda")
    assert [e[0] for e in trace_of(sim)] == ["segment_map", "alloc", "segment_map", "alloc"]
    assert sim.snapshot is not None
    assert sim.snapshot["allocator_settings"]["expandable_segments"] is True
    del a, b


def memlens_simulate(*args: str) -> subprocess.CompletedProcess[str]:
    """`python -m memlens simulate ARGS` in a child process, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_runs_a_script_as_main(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import sys, torch
        assert __name__ == "__main__" and sys.argv[1:] == ["--n", "512"]
        model = torch.nn.Linear(512, 512).cuda()
        model(torch.randn(8, 512, device="cuda")).sum().backward()
        print("allocated", torch.cuda.memory_allocated())
    """)
    )
    out = tmp_path / "sim.pickle"
    proc = memlens_simulate("-o", str(out), "--cublas-workspace", "0", str(script), "--n", "512")
    assert proc.returncode == 0, proc.stderr
    assert "allocated" in proc.stdout and f"written to {out}" in proc.stderr
    snap = pickle.loads(out.read_bytes())
    assert replay_live(snap) == active_blocks(snap)


def test_cli_reports_simulated_oom(tmp_path):
    script = tmp_path / "big.py"
    script.write_text("import torch\nx = torch.empty(2**30, device='cuda')\n")
    out = tmp_path / "big.pickle"
    proc = memlens_simulate("-o", str(out), "--device-memory", "1GiB", str(script))
    assert proc.returncode == 1
    assert "ran out of memory" in proc.stderr and out.exists()


def test_bad_size_is_a_user_error():
    with pytest.raises(memlens.MemlensError, match="cannot read the size"):
        memlens.simulate(device_memory="lots")


def test_scalars_tensors_from_data_and_timing_events_do_not_stop_a_script():
    with memlens.simulate(cublas_workspace=0) as sim:
        loss = torch.randn(8, device="cuda").sum()
        assert loss.item() == 0.0 and isinstance(loss.item(), float)  # no values: zero
        assert torch.tensor([3, 4], device="cuda").is_cuda
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        end.record()
        torch.cuda.synchronize()
        assert start.elapsed_time(end) == 0.0
        assert (
            torch.cuda.get_device_properties(0).total_memory == 81559 * 2**20
        )  # the default H100 preset
    assert sim.snapshot is not None
    sizes = [e["size"] for e in sim.snapshot["device_traces"][0] if e["action"] == "alloc"]
    assert sizes[:2] == [32, 4]  # randn(8) fp32, then the sum


def test_streams_pinned_memory_and_record_stream_are_accepted():
    with memlens.simulate(cublas_workspace=0) as sim:
        side = torch.cuda.Stream()
        host = torch.empty(256).pin_memory()
        with torch.cuda.stream(side):
            x = host.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())
        assert not host.is_pinned() and x.is_cuda
    assert sim.snapshot is not None
    assert [e["action"] for e in sim.snapshot["device_traces"][0]] == ["segment_alloc", "alloc"]
    del x


def test_max_entries_keeps_the_newest_and_stacks_none_records_no_frames():
    with memlens.simulate(max_entries=2, stacks=None, cublas_workspace=0) as sim:
        a = torch.empty(100, device="cuda")
        b = torch.empty(200, device="cuda")
        c = torch.empty(300, device="cuda")
    assert sim.snapshot is not None
    trace = sim.snapshot["device_traces"][0]
    assert [(e["action"], e["size"]) for e in trace] == [("alloc", 800), ("alloc", 1200)]
    assert all(e["frames"] == [] for e in trace)
    del a, b, c

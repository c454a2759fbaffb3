"""torch.compile's CUDA graph trees (`mode="reduce-overhead"`) in a simulation
(simulation/patches/cudagraph_trees.py): warm-up, recording into the tree's pool,
replays that allocate nothing, generations; on hand-worked bytes and against an H200
recording (tests/data/gpu/graphs/reduce_overhead.pickle.gz, torch 2.11)."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402

pytestmark = pytest.mark.slow  # Dynamo and Inductor's imports; the recording's script ~15 s CPU
MIB = 2**20
GPU = Path(__file__).resolve().parents[1] / "data" / "gpu" / "graphs"


def _calls(trace: list[dict[str, Any]], start: int) -> list[tuple[str, int, int]]:
    return [
        (e["action"], e["size"], e["stream"])
        for e in trace[start:]
        if e["action"] != "free_requested"
    ]


def test_warm_up_record_and_replay_to_the_byte():
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        model = torch.nn.Linear(256, 256, bias=False).cuda()  # 262,144 B, static
        f = torch.compile(model, mode="reduce-overhead")
        x = torch.randn(8, 256, device="cuda")  # 8,192 B: a user input, copied when recording
        calls = []
        for _ in range(3):  # `y` keeps each call's output alive into the next call
            start = len(sim.allocator.trace)
            y = f(x)
            calls.append(_calls(sim.allocator.trace, start))
        start = len(sim.allocator.trace)
        del y  # a replay's output: its memory is the pool's, freeing it frees nothing
        assert _calls(sim.allocator.trace, start) == []
        assert torch.compiler.cudagraph_mark_step_begin() is None  # torch's own, unchanged
    # the tree's stream is stream 1
    assert calls == [
        # the manager's empty capture: the CUDA generator's graph-safe state (default pool);
        # then the warm-up: the GEMM's output in the tree's pool
        [("segment_alloc", 2 * MIB, 1), ("alloc", 8, 1), ("alloc", 8, 1),
         ("segment_alloc", 2 * MIB, 1), ("alloc", 8192, 1)],
        # a new generation: the warm-up's output, still alive, is freed under it; x is
        # copied into the pool, the capture allocates the output, the copy dies in it
        [("free_completed", 8192, 1), ("alloc", 8192, 1), ("alloc", 8192, 1),
         ("free_completed", 8192, 1)],
        # the recording's output, still alive, freed under it; the replay allocates nothing
        [("free_completed", 8192, 1)],
    ]  # fmt: skip
    assert sim.snapshot is not None
    # by address: each new segment lies below the one before (allocator_model)
    assert [(s["stream"], tuple(s["segment_pool_id"]), s["allocated_size"]) for s in sim.snapshot["segments"]] == [
        (1, (0, 1), 0), (1, (0, 0), 1024), (0, (0, 0), 262144 + 8192)
    ]  # fmt: skip
    assert torch._inductor.cudagraph_trees.MarkStepBox.mark_step_counter == 0  # restored


def test_a_second_graph_after_replays_checkpoints_the_live_outputs():
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        f = torch.compile(torch.nn.Linear(256, 256, bias=False).cuda(), mode="reduce-overhead")
        g = torch.compile(lambda t: t * 2, mode="reduce-overhead")
        x = torch.randn(8, 256, device="cuda")
        for _ in range(3):  # warm-up, recording, replay: y is a replay's output
            y = f(x)
        calls = []
        for _ in range(3):
            start = len(sim.allocator.trace)
            z = g(y)
            calls.append(_calls(sim.allocator.trace, start))
        start = len(sim.allocator.trace)
        del y, z
        f(x)  # f's recording is a root: it replays
        calls.append(_calls(sim.allocator.trace, start))
    assert calls == [
        # g's warm-up follows f's replay: y, still alive, gets a block of the pool (on a
        # GPU the pool is restored from the checkpoint that holds it); then g's output;
        # its kernel's first launch autotunes two configs (2,048 elements: XBLOCK 256
        # and 128), each with the H100's 50 MiB L2 flush buffer, in the pool
        [("alloc", 8192, 1), ("alloc", 8192, 1), ("segment_alloc", 50 * MIB, 1)]
        + [("alloc", 50 * MIB, 1), ("free_completed", 50 * MIB, 1)] * 2,
        # a new generation frees the path's live outputs (y and z) under them; g is
        # recorded as a root: y, no longer the tree's, is copied in
        [("free_completed", 8192, 1), ("free_completed", 8192, 1), ("alloc", 8192, 1),
         ("alloc", 8192, 1), ("free_completed", 8192, 1)],
        # the recording's output freed under it, then a replay
        [("free_completed", 8192, 1)],
        [],
    ]  # fmt: skip


def test_a_replayed_gradient_is_stolen_not_copied():
    # AccumulateGrad keeps a replay's gradient as .grad (on a GPU it is a cached tensor
    # of the tree); an op on it must not count its storage as a new allocation
    with memlens.simulate(cublas_workspace=0) as sim:
        model = torch.nn.Linear(64, 64).cuda()
        step = torch.compile(model, mode="reduce-overhead")
        for _ in range(3):
            start = len(sim.allocator.trace)
            step(torch.randn(8, 64, device="cuda")).sum().backward()
            grads = [p.grad.detach() for p in model.parameters()]
            model.zero_grad(set_to_none=True)
            del grads
    # the third step replays both graphs: the input (2,048 B), sum's output and its
    # gradient (4 B each) and sum's backward (2,048 B), all on the default stream
    assert sorted(_calls(sim.allocator.trace, start)) == sorted(
        [("alloc", 2048, 0), ("alloc", 4, 0), ("alloc", 4, 0), ("alloc", 2048, 0)]
        + [("free_completed", 2048, 0), ("free_completed", 4, 0), ("free_completed", 4, 0)]
        + [("free_completed", 2048, 0)]
    )


# ---------------------------------------------------------------- the H200 recording
def _left_out(e: dict[str, Any]) -> bool:
    """What the simulation does not model, in the recording: the tiny CUDA tensors
    Inductor makes while compiling (FakeTensor's `init_gpu_context`, the attention
    patterns of fx_passes)."""
    for f in e.get("frames") or []:
        if "fake_tensor.py" in f["filename"] or "fx_passes" in f["filename"]:
            return True
    return False


def _events(trace: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    streams: dict[int, int] = {0: 0}
    return [
        (e["action"], e["size"], streams.setdefault(e["stream"], len(streams)))
        for e in trace
        if e["action"] in ("alloc", "free_completed", "segment_alloc") and not _left_out(e)
    ]


def _allocated(events: list[tuple[str, int, int]]) -> tuple[int, int]:
    """(peak, end) of the bytes requested and not yet freed."""
    now = peak = 0
    for action, size, _ in events:
        now += size if action == "alloc" else -size if action == "free_completed" else 0
        peak = max(peak, now)
    return peak, now


def _segments(snapshot: dict[str, Any]) -> list[tuple[int, tuple[int, int], int]]:
    streams: dict[int, int] = {0: 0}
    for s in sorted(snapshot["segments"], key=lambda s: s["address"]):
        streams.setdefault(s["stream"], len(streams))
    return sorted(
        (streams[s["stream"]], tuple(s["segment_pool_id"]), s["total_size"])
        for s in snapshot["segments"]
    )


def test_reduce_overhead_training_matches_the_h200_recording(tmp_path, monkeypatch, capsys):
    with gzip.open(GPU / "reduce_overhead.pickle.gz") as f:
        real = pickle.load(f)
    monkeypatch.chdir(GPU)
    monkeypatch.syspath_prepend(str(GPU.parent / "scripts"))  # the recordings' _rec.py
    run = run_script(
        GPU / "reduce_overhead.py", [str(tmp_path / "sim.pickle")], tmp_path / "out.pickle",
        gpu="h200",
    )  # fmt: skip
    ours, theirs = _events(run.snapshot["device_traces"][0]), _events(real["device_traces"][0])
    # Every allocation and free in order, on the same streams and pools: the warm-up on
    # the tree's stream in its pool (cuBLAS's workspace made and freed there), Triton's
    # autotuning at each kernel's first launch (the warm-up's), the recording (the input
    # copied in), replays with none
    assert len(ours) == len(theirs) == 1058
    assert ours == theirs
    # autotuning: the GELU's pointwise kernel (2 configs) in the forward; the bias
    # gradient's reduction (4) and the activation gradient's kernel, with the other bias
    # gradient's reduction fused in (4 configs, its in-place buffer cloned for each of
    # 1 + 5 + 100 calls), in the backward; each config with the H200's 60 MiB L2 flush
    flush = [e for e in ours if e[:2] == ("alloc", 60 * MIB)]
    assert flush == [("alloc", 60 * MIB, 1)] * 10
    clones = [
        e for e in run.snapshot["device_traces"][0]
        if e["action"] == "alloc" and e["frames"][0]["name"] == "clone_preserve_strides"
    ]  # fmt: skip
    assert [e["size"] for e in clones] == [262144] * 4 * 106
    assert _allocated(theirs) == _allocated(ours) == (109989912, 25196560)
    # The default pool and the tree's pool (0, 1) on its stream, autotuning's two 60 MiB
    # segments in it (the first gradient took a block of the first: the second's flush
    # needed another)
    default = [(0, (0, 0), 2 * MIB), (0, (0, 0), 20 * MIB), (0, (0, 0), 20 * MIB)]
    generator = [(1, (0, 0), 2 * MIB)]  # the graph-safe RNG state of the empty capture
    pool = [
        (1, (0, 1), 2 * MIB),
        (1, (0, 1), 32 * MIB),
        (1, (0, 1), 60 * MIB),
        (1, (0, 1), 60 * MIB),
    ]
    assert _segments(real) == _segments(run.snapshot) == default + generator + pool
    assert sum(s["total_size"] for s in real["segments"]) == 207618048  # 198 MiB
    assert sum(s["total_size"] for s in run.snapshot["segments"]) == 207618048
    # the script prints torch.cuda's peaks: what the GPU printed (README.md)
    assert capsys.readouterr().out.endswith("peak 109991936 reserved 207618048\n")

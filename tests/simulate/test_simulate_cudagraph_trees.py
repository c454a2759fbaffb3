"""torch.compile's CUDA graph trees (`mode="reduce-overhead"`) in a simulation
(simulation/patches/cudagraph_trees.py): warm-up, recording into the tree's pool,
replays that allocate nothing, generations; on hand-worked bytes and against an H200
recording (tests/data/gpu/graphs/reduce_overhead.pickle.gz, torch 2.11)."""

from __future__ import annotations

import difflib
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
        # GPU the pool is restored from the checkpoint that holds it); then g's output
        [("alloc", 8192, 1), ("alloc", 8192, 1)],
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
    """What the simulation does not model, in the recording: Triton's autotuning on the
    first call of each kernel (the L2-sized flush buffer of `benchmark_gpu`, copies of
    arguments), and the tiny CUDA tensors Inductor makes while compiling (FakeTensor's
    `init_gpu_context`, the attention patterns of fx_passes)."""
    for f in e.get("frames") or []:
        name = f["filename"]
        if "benchmarking.py" in name or f["name"] == "clone_preserve_strides":
            return True
        if "fake_tensor.py" in name or "fx_passes" in name:
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


def test_reduce_overhead_training_matches_the_h200_recording(tmp_path, monkeypatch):
    with gzip.open(GPU / "reduce_overhead.pickle.gz") as f:
        real = pickle.load(f)
    monkeypatch.chdir(GPU)
    monkeypatch.syspath_prepend(str(GPU.parent / "scripts"))  # the recordings' _rec.py
    run = run_script(
        GPU / "reduce_overhead.py", [str(tmp_path / "sim.pickle")], tmp_path / "out.pickle",
        gpu="h100",
    )  # fmt: skip
    ours, theirs = _events(run.snapshot["device_traces"][0]), _events(real["device_traces"][0])
    # Every allocation and free in order, on the same streams and pools: the warm-up on
    # the tree's stream in its pool (cuBLAS's workspace made and freed there), the
    # recording (the input copied in), replays with none; but for three entries
    different = [
        (tag, theirs[i1:i2], ours[j1:j2])
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, theirs, ours, autojunk=False).get_opcodes()
        if tag != "equal"
    ]  # fmt: skip
    assert (len(ours), len(theirs)) == (189, 188)
    assert different == [
        # the first 4 MiB gradient: the GPU put it in the pool's 60 MiB segment that
        # autotuning's flush buffer had left free; the simulation makes a 20 MiB one
        ("insert", [], [("segment_alloc", 20 * MIB, 1)]),
        # the bias gradient's reduction (8,192 B): Inductor's scheduler runs it two
        # kernels earlier than the graph's order the model follows, in the warm-up ...
        ("delete", [("alloc", 8192, 1)], []),
        ("insert", [], [("alloc", 8192, 1)]),
        # ... and in the recording
        ("insert", [], [("free_completed", 262144, 1), ("alloc", 4 * MIB, 1), ("free_completed", 65536, 1)]),
        ("delete", [("alloc", 4 * MIB, 1), ("free_completed", 262144, 1), ("free_completed", 65536, 1)], []),
    ]  # fmt: skip
    # so the peak is 8,192 B lower (the reduction's output while a 256 KiB buffer
    # lives); the end state is the same
    assert _allocated(theirs) == (67608600, 25196560)
    assert _allocated(ours) == (67608600 - 8192, 25196560)
    # The default pool and the tree's pool (0, 1) on its stream: the same segments but
    # for autotuning's two 60 MiB flush buffers (kept by the pool), and the 20 MiB above
    default = [(0, (0, 0), 2 * MIB), (0, (0, 0), 20 * MIB), (0, (0, 0), 20 * MIB)]
    generator = [(1, (0, 0), 2 * MIB)]  # the graph-safe RNG state of the empty capture
    pool = [(1, (0, 1), 2 * MIB), (1, (0, 1), 32 * MIB)]
    assert _segments(real) == default + generator + pool + [(1, (0, 1), 60 * MIB)] * 2
    assert _segments(run.snapshot) == default + generator + sorted(pool + [(1, (0, 1), 20 * MIB)])
    assert sum(s["total_size"] for s in real["segments"]) == 207618048  # 198 MiB
    assert (
        run.snapshot is not None
        and sum(s["total_size"] for s in run.snapshot["segments"]) == 98 * MIB
    )

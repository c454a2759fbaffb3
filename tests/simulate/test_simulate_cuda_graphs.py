"""CUDA graphs in a simulation: the private pool in the allocator model, capture, replay
and reset in `memlens simulate`, against hand-worked bytes and against H200 recordings
(tests/data/gpu/graphs, torch 2.11)."""

from __future__ import annotations

import gzip
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memlens.analysis.allocator_model import CachingAllocator

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402

MIB = 2**20
TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
GPU = Path(__file__).resolve().parents[1] / "data" / "gpu" / "graphs"
WORKSPACE = 32 * MIB  # cuBLAS's on Hopper, per (thread, stream)
LT_WORKSPACE = MIB  # cuBLASLt's, which a GPU allocates at its first addmm-with-bias


def segments(snapshot: dict[str, Any]) -> list[tuple[int, tuple[int, int], int, list[Any]]]:
    """(stream, pool, size, [(block size, requested, state)]) per segment, oldest first: a
    simulation places each new segment below the one before, as a GPU mostly does."""
    return [
        (
            s["stream"],
            tuple(s["segment_pool_id"]),
            s["total_size"],
            [(b["size"], b["requested_size"], b["state"]) for b in s["blocks"]],
        )
        for s in sorted(snapshot["segments"], key=lambda s: -s["address"])
    ]


# ---------------------------------------------------------------- the allocator model
def test_a_capture_takes_its_streams_requests_into_the_private_pool():
    a = CachingAllocator(clock=lambda: 0)
    a.begin_allocate_to_pool((1, 0), stream=7)
    inside = a.malloc(1000, stream=7)  # the capturing stream: the pool's own segment
    outside = a.malloc(1000, stream=0)  # another stream: the default pool
    a.end_allocate_to_pool((1, 0))
    a.free(inside)  # back to the private pool, not to stream 7's default free list
    after = a.malloc(1000, stream=7)  # the capture ended: a new default-pool segment
    assert [(s["stream"], s["segment_pool_id"], s["total_size"]) for s in a.segments_snapshot()] == [
        (7, (1, 0), 2 * MIB), (0, (0, 0), 2 * MIB), (7, (0, 0), 2 * MIB)
    ]  # fmt: skip
    assert after != inside and outside not in (inside, after)
    a.empty_cache()  # the pool is still used by its graph: its free segment stays
    assert [s["segment_pool_id"] for s in a.segments_snapshot()] == [(1, 0), (0, 0), (0, 0)]
    a.release_pool((1, 0))  # the graph is gone: empty_cache returns the pool's segment
    a.empty_cache()
    assert [s["segment_pool_id"] for s in a.segments_snapshot()] == [(0, 0), (0, 0)]
    assert a.private_pools == {} and a.freeable_pools == []
    assert a.reserved == 4 * MIB


def test_a_shared_pool_is_kept_until_its_last_graph_is_released():
    a = CachingAllocator(clock=lambda: 0)
    for _ in range(2):  # two captures into (0, 1), one after the other
        a.begin_allocate_to_pool((0, 1), stream=3)
        a.free(a.malloc(3 * MIB, stream=3))  # the second reuses the first's free block
        a.end_allocate_to_pool((0, 1))
    assert a.private_pools[(0, 1)].use_count == 2
    assert [(s["total_size"], s["segment_pool_id"]) for s in a.segments_snapshot()] == [
        (20 * MIB, (0, 1))
    ]
    a.release_pool((0, 1))
    a.empty_cache()
    assert a.reserved == 20 * MIB
    a.release_pool((0, 1))
    a.empty_cache()
    assert a.reserved == 0 and a.segments_snapshot() == []


def test_a_stream_that_joined_the_capture_allocates_in_its_pool():
    a = CachingAllocator(clock=lambda: 0)
    a.begin_allocate_to_pool((0, 1), stream=1)
    a.join_capture((0, 1), stream=2)  # stream 2 waited on the capture's work
    joined = a.malloc(1000, stream=2)
    a.end_allocate_to_pool((0, 1))  # every stream of the capture leaves it
    after = a.malloc(1000, stream=2)
    assert [(s["stream"], s["segment_pool_id"]) for s in a.segments_snapshot()] == [
        (2, (0, 1)), (2, (0, 0))
    ]  # fmt: skip
    assert joined != after and a.captures == []
    with pytest.raises(memlens.MemlensError, match="no capture into memory pool"):
        a.join_capture((0, 1), stream=2)


# ---------------------------------------------------------------- a simulated script
CAPTURE = """
import torch

x = torch.empty(1000, device="cuda")           # 4,000 B, default pool, stream 0
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):                  # the capture stream: stream 1
    y = x * 2                                  # 4,000 B in the graph's pool
    z = y + 1                                  # 4,000 B in the pool: the static output
    del y                                      # freed inside the pool
for _ in range(3):
    graph.replay()                             # allocates nothing
torch.cuda.memory._dump_snapshot("captured.pickle")
del graph                                      # releasePool; the generator's state goes
torch.cuda.empty_cache()                       # z still lives: the pool's segment stays
torch.cuda.memory._dump_snapshot("released.pickle")
del z
torch.cuda.empty_cache()                       # now the pool's segment goes
"""


def test_capture_replay_and_release_to_the_byte(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "capture.py").write_text(CAPTURE)
    run = run_script(tmp_path / "capture.py", [], tmp_path / "out.pickle")
    captured = pickle.loads((tmp_path / "captured.pickle").read_bytes())
    assert segments(captured) == [
        (0, (0, 0), 2 * MIB, [(4096, 4000, "active_allocated"), (2 * MIB - 4096, 0, "inactive")]),
        # the CUDA generator's graph-safe seed and offset, before the pool took over
        (1, (0, 0), 2 * MIB, [(512, 8, "active_allocated"), (512, 8, "active_allocated"),
                              (2 * MIB - 1024, 0, "inactive")]),
        (1, (1, 0), 2 * MIB, [(4096, 0, "inactive"), (4096, 4000, "active_allocated"),
                              (2 * MIB - 8192, 0, "inactive")]),
    ]  # fmt: skip
    actions = [(e["action"], e["size"], e["stream"]) for e in captured["device_traces"][0]]
    # the generator's state, the capture, and nothing for the three replays
    assert actions == [
        ("segment_alloc", 2 * MIB, 0), ("alloc", 4000, 0),
        ("segment_alloc", 2 * MIB, 1), ("alloc", 8, 1), ("alloc", 8, 1),
        ("segment_alloc", 2 * MIB, 1), ("alloc", 4000, 1), ("alloc", 4000, 1),
        ("free_requested", 4000, 1), ("free_completed", 4000, 1),
    ]  # fmt: skip
    # the generator's segment was emptied and returned; the pool's stays while z lives
    released = pickle.loads((tmp_path / "released.pickle").read_bytes())
    assert [(s[0], s[1], s[2]) for s in segments(released)] == [
        (0, (0, 0), 2 * MIB), (1, (1, 0), 2 * MIB)
    ]  # fmt: skip
    assert [(s[0], s[1]) for s in segments(run.whole)] == [(0, (0, 0))]


def test_the_pool_shows_in_summarys_pools_at_peak(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "capture.py").write_text(CAPTURE)
    run_script(tmp_path / "capture.py", [], tmp_path / "out.pickle")
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "summary", "--json", "captured.pickle"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    pools = json.loads(done.stdout)["devices"][0]["pools_at_peak"]
    # the peak is inside the capture, y and z both live in the graph's pool
    assert pools == [
        {"pool": [1, 0], "bytes": 8000, "count": 2},
        {"pool": [0, 0], "bytes": 4016, "count": 3},  # x and the generator's two
    ]


def test_make_graphed_callables_replays_without_allocating():
    with memlens.simulate(cublas_workspace=0) as sim:
        model = torch.nn.Linear(256, 256, bias=False).cuda()  # 262,144 B
        graphed = torch.cuda.make_graphed_callables(model, (torch.randn(8, 256, device="cuda"),))
        before = len(sim.allocator.trace)
        out = graphed(torch.randn(8, 256, device="cuda"))
        out.sum().backward()
        step = [(e["action"], e["size"]) for e in sim.allocator.trace[before:]]
    # the input (8 x 256 fp32); sum's output and its gradient (4 B each); the weight's
    # gradient is the backward graph's static output in the pool: backward allocates nothing
    assert [s for s in step if s[0] == "alloc"] == [("alloc", 8192), ("alloc", 4), ("alloc", 4)]
    assert sim.snapshot is not None
    pools = {tuple(s["segment_pool_id"]) for s in sim.snapshot["segments"]}
    assert pools == {(0, 0), (0, 1)}  # make_graphed_callables' graph_pool_handle()


# ---------------------------------------------------------------- H200 recordings
def _allocations(trace: list[dict[str, Any]], lt: set[int]) -> list[tuple[str, int, int]]:
    """(action, size, stream in order of first use) of allocs and frees, leaving out the
    blocks at `lt`."""
    streams: dict[int, int] = {0: 0}
    return [
        (e["action"], e["size"], streams.setdefault(e["stream"], len(streams)))
        for e in trace
        if e["action"] in ("alloc", "free_requested", "free_completed") and e["addr"] not in lt
    ]


def _lt_workspaces(trace: list[dict[str, Any]]) -> set[int]:
    """cuBLASLt's workspaces in a recording: the 1 MiB block allocated right after a
    cuBLAS workspace and never freed (the simulation does not allocate them)."""
    freed = {e["addr"] for e in trace if e["action"] == "free_completed"}
    return {
        e["addr"]
        for prev, e in zip(trace, trace[1:])
        if e["action"] == "alloc" and e["size"] == LT_WORKSPACE and e["addr"] not in freed
        and prev["action"] == "alloc" and prev["size"] == WORKSPACE
    }  # fmt: skip


def _pool_active(snapshot: dict[str, Any], skip: set[int]) -> dict[tuple[int, int], int]:
    out: dict[tuple[int, int], int] = {}
    for s in snapshot["segments"]:
        pool = tuple(s["segment_pool_id"])
        address = s["address"]
        for b in s["blocks"]:
            if b["state"] == "active_allocated" and address not in skip:
                out[pool] = out.get(pool, 0) + b["size"]
            address += b["size"]
    return out


@pytest.mark.parametrize(
    "name, script, expandable",
    [
        ("graph_capture", "graph_capture.py", False),
        ("graph_capture_expandable", "graph_capture.py", True),
        ("graphed_callables", "graphed_callables.py", False),
    ],
)
def test_the_simulation_matches_the_h200_recording(tmp_path, monkeypatch, name, script, expandable):
    if name == "graphed_callables" and TORCH >= (2, 14):
        # the simulation runs the installed torch's make_graphed_callables, which from 2.14
        # captures on its warm-up stream (one workspace fewer in the pool than 2.11's)
        pytest.skip("recorded with torch 2.11, whose make_graphed_callables differs")
    real = pickle.loads(gzip.decompress((GPU / f"{name}.pickle.gz").read_bytes()))
    monkeypatch.chdir(GPU)
    monkeypatch.syspath_prepend(str(GPU))
    monkeypatch.syspath_prepend(str(GPU.parent / "scripts"))  # the recordings' _rec.py
    run = run_script(
        GPU / script, [str(tmp_path / "sim.pickle")], tmp_path / "out.pickle", gpu="h100",
        expandable_segments=expandable,
    )  # fmt: skip
    sim = run.snapshot
    lt = _lt_workspaces(real["device_traces"][0])
    assert lt  # one per (thread, stream) whose first GEMM was an addmm with bias
    # every allocation and free, in order, on the same streams: warm-up on the side
    # stream, the capture into the pool, and replays that allocate nothing; the cuBLASLt
    # workspaces included (patches/cublas_lt.py)
    assert _allocations(sim["device_traces"][0], set()) == _allocations(
        real["device_traces"][0], set()
    )
    # the same pools (the graph's own (1, 0), or graph_pool_handle()'s (0, 1)), holding
    # the same live bytes
    assert _pool_active(sim, set()) == _pool_active(real, set())


def test_plans_replay_of_the_request_log_keeps_the_pools():
    from memlens.simulation.request_log import BEGIN_POOL, END_POOL, RELEASE_POOL, replay_log

    with memlens.simulate(cublas_workspace=0) as sim:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            inside = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
            del inside  # its 20 MiB segment is the pool's: the default pool cannot reuse it
        outside = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
        del graph, outside
        torch.cuda.empty_cache()
    log = sim.allocator.request_log()
    assert [k for k in log.kinds.tolist() if k >= BEGIN_POOL] == [
        BEGIN_POOL,
        END_POOL,
        RELEASE_POOL,
    ]
    # 2 MiB of the generator's state, 20 MiB in the pool, 20 MiB in the default pool
    assert sim.allocator.peak_reserved == 42 * MIB
    assert replay_log(log, None).peak_reserved == 42 * MIB
    assert replay_log(log, 30 * MIB).oom  # without the pools, 22 MiB would have fitted


# FSDP2's way: side streams wait on the capture's stream (wait_stream), or on an event
# recorded in it, and so join the capture; an event recorded before it joins nothing
JOINED = """
import torch

side, late, apart = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
before = torch.cuda.current_stream().record_event()   # recorded outside any capture
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):                          # the capture stream: stream 4
    here = torch.cuda.current_stream()
    side.wait_stream(here)                             # joins the capture
    with torch.cuda.stream(side):
        a = torch.empty(1000, device="cuda")           # in the pool, on stream 1
    late.wait_event(here.record_event())               # joins too
    with torch.cuda.stream(late):
        b = torch.empty(1000, device="cuda")           # in the pool, on stream 2
        joined = [torch.cuda.is_current_stream_capturing(), late.is_capturing()]
    apart.wait_event(before)                           # not the capture's work
    with torch.cuda.stream(apart):
        c = torch.empty(1000, device="cuda")           # the default pool, stream 3
        joined.append(torch.cuda.is_current_stream_capturing())
    here.wait_stream(side)                             # joined back, as CUDA requires
    here.wait_stream(late)
with torch.cuda.stream(side):
    d = torch.empty(1000, device="cuda")               # the capture ended: default pool
joined.append(side.is_capturing())
torch.cuda.memory._dump_snapshot("joined.pickle")
open("joined.txt", "w").write(repr(joined))
"""


def test_streams_that_wait_on_the_capture_join_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "joined.py").write_text(JOINED)
    run_script(tmp_path / "joined.py", [], tmp_path / "out.pickle", cublas_workspace=0)
    captured = pickle.loads((tmp_path / "joined.pickle").read_bytes())
    allocs = [
        (e["stream"], e["size"], e["addr"])
        for e in captured["device_traces"][0]
        if e["action"] == "alloc"
    ]
    pool_of = {}
    for seg in captured["segments"]:
        for b in range(seg["address"], seg["address"] + seg["total_size"], 512):
            pool_of[b] = tuple(seg["segment_pool_id"])
    # the generator's two blocks on the capture stream, then a, b, c, d
    assert [(s, n, pool_of[addr]) for s, n, addr in allocs] == [
        (4, 8, (0, 0)), (4, 8, (0, 0)),
        (1, 4000, (1, 0)), (2, 4000, (1, 0)), (3, 4000, (0, 0)), (1, 4000, (0, 0)),
    ]  # fmt: skip
    # is_current_stream_capturing and Stream.is_capturing: inside on a joined stream,
    # outside on the stream that waited on older work, and after the capture
    assert (tmp_path / "joined.txt").read_text() == "[True, True, False, False]"


def test_plans_replay_of_the_request_log_keeps_the_joined_streams():
    from memlens.simulation.request_log import JOIN_POOL, replay_log

    with memlens.simulate(cublas_workspace=0) as sim:
        side = torch.cuda.Stream()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            side.wait_stream(torch.cuda.current_stream())  # joins the capture
            with torch.cuda.stream(side):
                inside = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
                del inside  # the pool's 20 MiB segment, on the side stream
            torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.stream(side):  # after the capture: a segment of the default pool
            outside = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
        del outside
    log = sim.allocator.request_log()
    assert log.kinds.tolist().count(JOIN_POOL) == 1
    # 2 MiB of the generator's state, 20 MiB in the pool, 20 MiB in the default pool
    assert sim.allocator.peak_reserved == 42 * MIB
    assert replay_log(log, None).peak_reserved == 42 * MIB

"""`memlens simulate` on many GPUs (issue 22): torchrun's environment per rank, fake
process groups, the collectives' own buffers, and DDP's gradient buckets, exact to the
byte on a two-layer MLP (tests/simulate/ddp_script.py).

The model: Linear(256, 256), ReLU, Linear(256, 256) in fp32. Its parameters P are two
weights of 262,144 bytes and two biases of 1,024 (every size a multiple of 512, so the
allocator's rounding adds nothing): P = 526,336 bytes. A step of batch 8 keeps x (8,192),
ReLU's output (8,192, saved for the second Linear's backward) and the loss (4 -> 512).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memlens.errors import MemlensError  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.distributed.env import World  # noqa: E402

SCRIPT = str(Path(__file__).with_name("ddp_script.py"))
P = 2 * 262_144 + 2 * 1_024  # the parameters, bytes
ACTS = 8_192 + 8_192 + 512  # x, ReLU's output, the loss
KEPT = 8_192 + 512  # x and the loss, alive after backward until the loop drops them


def run_rank(
    tmp_path, monkeypatch, rank: int, world: World, *args: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Rank `rank` simulated in this process: (its checkpoints, its whole-run snapshot)."""
    for key, value in world.env(rank).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "marks.json"
    run = run_script(
        SCRIPT, ["--out", str(out), *args], tmp_path / f"rank{rank}.pickle", cublas_workspace=0
    )
    return json.loads(out.read_text()), run.whole


def active_blocks(snapshot: dict[str, Any]) -> list[int]:
    return sorted(
        b["size"] for s in snapshot["segments"] for b in s["blocks"]
        if b["state"] == "active_allocated"
    )  # fmt: skip


def run_source(tmp_path, monkeypatch, source: str, rank: int, world: World) -> dict[str, Any]:
    """`source` (a script writing its marks as JSON to argv[1]) simulated as `rank` of
    `world`, no cuBLAS workspace: its marks."""
    (tmp_path / "script.py").write_text(source)
    for key, value in world.env(rank).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "m.json"
    run_script(tmp_path / "script.py", [str(out)], tmp_path / "s.pickle", cublas_workspace=0)
    marks: dict[str, Any] = json.loads(out.read_text())
    return marks


# ---------------------------------------------------------------- torchrun's environment
def test_world_env_is_torchruns_numbering_node_by_node():
    env = World(nproc_per_node=4, nnodes=2).env(6)
    assert env["RANK"] == "6" and env["LOCAL_RANK"] == "2" and env["GROUP_RANK"] == "1"
    assert env["WORLD_SIZE"] == "8" and env["LOCAL_WORLD_SIZE"] == "4"
    assert env["GROUP_WORLD_SIZE"] == "2" and env["ROLE_WORLD_SIZE"] == "8"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29500")


def test_ranks_pick_lists_ranges_and_refuses_outside_the_world():
    world = World(nproc_per_node=8, nnodes=2)
    assert world.pick(None) == list(range(16)) == world.pick("all")
    assert world.pick("0,3,8-10,3") == [0, 3, 8, 9, 10]
    with pytest.raises(MemlensError, match="outside the world of 16"):
        world.pick("15,16")
    with pytest.raises(MemlensError, match="numbers and ranges"):
        world.pick("first")


# ---------------------------------------------------------------- DDP, by hand
@pytest.mark.parametrize("world_size", [2, 4])
def test_ddp_holds_one_bucket_of_every_gradient_on_top_of_the_single_gpu_run(
    tmp_path, monkeypatch, world_size
):
    world = World(world_size)
    ddp, _ = run_rank(tmp_path, monkeypatch, world_size - 1, world)
    single, _ = run_rank(tmp_path, monkeypatch, world_size - 1, world, "--no-ddp")
    assert ddp["env"]["RANK"] == str(world_size - 1) and ddp["world"] == world_size
    assert ddp["backend"] == "nccl"  # what the script asked for, not the stand-in
    # the single-GPU run: parameters, then activations, gradients, AdamW's two moments
    assert single["model"] == single["wrapped"] == P
    assert single["forward0"] == P + ACTS
    assert single["backward0"] == 2 * P + KEPT
    assert single["step0"] == 4 * P + KEPT
    assert single["zero_grad0"] == 3 * P + KEPT
    assert single["forward1"] == 3 * P + ACTS
    # DDP (gradient_as_bucket_view=False): the reducer's flat bucket (all parameters in
    # one bucket until the first backward, 526,336 bytes < the 1 MiB first bucket after
    # the rebuild) is alive from construction on: exactly P more at every checkpoint
    for mark in single:
        if mark not in ("model", "env"):
            assert ddp[mark] == single[mark] + P, mark


def test_ddp_verifies_parameter_shapes_with_one_gather_output_per_rank(tmp_path, monkeypatch):
    # verify_params_across_processes: the count (one int64), one output per rank for its
    # all-gather, then 2 int64 per dimension of every parameter: 2 * (2+1+2+1) * 8 = 96
    _, whole = run_rank(tmp_path, monkeypatch, 0, World(4))
    sizes = [e["size"] for e in whole["device_traces"][0] if e["action"] == "alloc"]
    assert sizes.count(8) == 1 + 4
    assert sizes.count(96) == 1


def test_gradient_as_bucket_view_keeps_gradients_in_the_bucket(tmp_path, monkeypatch):
    view, _ = run_rank(tmp_path, monkeypatch, 1, World(2), "--as-view")
    single, _ = run_rank(tmp_path, monkeypatch, 1, World(2), "--no-ddp")
    # after backward the gradients are views of the bucket: no memory beyond the
    # single-GPU run, which holds the same bytes as separate gradients
    assert view["backward0"] == single["backward0"] == 2 * P + KEPT
    assert view["step0"] == single["step0"] == 4 * P + KEPT
    # zero_grad drops the views; the bucket (every gradient's bytes) stays
    assert view["zero_grad0"] == single["zero_grad0"] + P == 4 * P + KEPT


@pytest.mark.parametrize("flag", ["--static-graph", "--find-unused"])
def test_static_graph_and_find_unused_add_the_used_parameters_map(tmp_path, monkeypatch, flag):
    # one int32 per parameter on the device (local_used_map_dev_: 16 bytes -> 512),
    # made at construction; its host twin is not device memory
    marks, _ = run_rank(tmp_path, monkeypatch, 1, World(2), flag, "--steps", "1")
    assert marks["wrapped"] == 2 * P + 512
    assert marks["backward0"] == 3 * P + 512 + KEPT


def test_bucket_cap_splits_the_rebuilt_buckets_in_gradient_order(tmp_path, monkeypatch):
    # bucket_cap_mb=0.25 (262,144 bytes, also the first bucket's cap when not default):
    # one bucket of everything at construction; after the first backward the reducer
    # rebuilds in gradient order (bias2, weight2 | bias1, weight1), closing a bucket once
    # it reaches the cap: two buckets of 1,024 + 262,144 = 263,168 bytes
    marks, whole = run_rank(tmp_path, monkeypatch, 0, World(2), "--bucket-cap-mb", "0.25")
    blocks = active_blocks(whole)
    assert blocks.count(263_168) == 2 and P not in blocks
    assert marks["wrapped"] == 2 * P  # the single bucket of construction
    assert marks["forward1"] == 4 * P + ACTS  # two buckets, same total bytes


# ---------------------------------------------------------------- collectives
COLLECTIVES = """
import torch, torch.distributed as dist
dist.init_process_group("nccl")
x = torch.empty(1024, device="cuda")                       # 4,096 bytes
outs = [torch.empty(1024, device="cuda") for _ in range(dist.get_world_size())]
big = torch.empty(1024 * dist.get_world_size(), device="cuda")
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
def peak_of(fn):
    torch.cuda.reset_peak_memory_stats()
    work = fn()
    if work is not None:
        work.wait()
    return torch.cuda.max_memory_allocated() - base
marks = {
    "all_reduce": peak_of(lambda: dist.all_reduce(x, async_op=True)),
    "all_gather": peak_of(lambda: dist.all_gather(outs, x, async_op=True)),
    "into_tensor": peak_of(lambda: dist.all_gather_into_tensor(big, x, async_op=True)),
    "reduce_scatter": peak_of(lambda: dist.reduce_scatter(x, outs, async_op=True)),
    "barrier": peak_of(lambda: dist.barrier(async_op=True)),
    "broadcast": peak_of(lambda: dist.broadcast(x, 0, async_op=True)),
    "after": torch.cuda.memory_allocated() - base,
    "shape": list(outs[1].shape), "device": str(big.device),
    "value": dist.all_reduce(x, async_op=True).get_future().value()[0].shape[0],
}
import json, sys
json.dump(marks, open(sys.argv[1], "w"))
"""


@pytest.mark.filterwarnings("ignore:`torch.distributed.all_gather_into_tensor` is deprecated")
def test_collectives_allocate_what_process_group_nccl_allocates(tmp_path, monkeypatch):
    marks = run_source(tmp_path, monkeypatch, COLLECTIVES, 2, World(4))
    # in place, or into the caller's output: nothing
    assert marks["all_reduce"] == marks["into_tensor"] == marks["broadcast"] == 0
    # a list of equal outputs (inputs): flattened into one world x 4,096 buffer
    assert marks["all_gather"] == marks["reduce_scatter"] == 4 * 4_096
    assert marks["barrier"] == 512  # its one float32, all-reduced
    assert marks["after"] == 0  # every buffer freed when its op completes
    assert marks["shape"] == [1024] and marks["device"] == "cuda:0"
    assert marks["value"] == 1024  # the completed Work's future holds the outputs


# ---------------------------------------------------------------- the launcher, in process
def test_a_rank_dependent_script_gives_an_odd_rank_that_memlens_fleet_flags(tmp_path, monkeypatch):
    from memlens import fleet

    job = tmp_path / "job"  # the snapshots alone (marks.json would read as one)
    job.mkdir()
    for rank in range(4):
        run_rank(tmp_path, monkeypatch, rank, World(4), "--steps", "1", "--rank-extra", "1048576")
        (tmp_path / f"rank{rank}.pickle").rename(job / f"rank{rank}.pickle")
    result = fleet.run(str(job), workers=1)
    assert result["ranks_ok"] == 4
    assert [o["rank"] for o in result["outliers"]] == [1]
    diff = result["outliers"][0]["diff"]
    assert diff is not None
    top = diff["sites"][0]
    assert (top["change"], top["a_bytes"]) == (2**20, 0)  # rank 1's extra tensor alone


# ---------------------------------------------------------------- FSDP2, by hand
def r512(n: int) -> int:
    """The caching allocator's rounding of a request (512-byte multiples)."""
    return -(-n // 512) * 512


FSDP_SCRIPT = str(Path(__file__).with_name("fsdp_script.py"))


def forward_peak(resident: int, gathered: int, unsharded: int, copied_in: int = 0) -> int:
    """The FSDP script's forward peak, which comes in the second unit, with x and ReLU's
    output (8,192 each) alive and the first unit's all-gather output still referenced by
    FSDP2's comm_ctx.all_gather_state (kept so the next unit's copy-in overlaps with it).
    `resident`: what stays on the GPU throughout (the shards, the first unit's unsharded
    parameters when they are kept); `gathered`, `unsharded`: one unit's all-gather output
    and unsharded parameters; `copied_in`: its all-gather input made on the GPU (the host
    shard's copy under CPU offload), freed when unshard returns. The largest of:
    - the all-gather: both units' outputs and the second unit's input;
    - the copy-out, which makes the unsharded parameters. torch 2.13 and 2.14's
      `wait_for_unshard` clears `all_gather_state` but holds it in its local
      `prev_all_gather_state` until it returns, after the copy-out: both outputs are
      alive. torch 2.15 moved that into
      `FSDPCommContext.release_all_gather_state_for_comm_reuse`, whose local is gone
      before the copy-out: only the second unit's output is;
    - the second Linear's output (8,192), after the first unit's output is freed."""
    from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPCommContext

    both_at_copy_out = not hasattr(FSDPCommContext, "release_all_gather_state_for_comm_reuse")
    alive = resident + 8_192 + 8_192
    at_all_gather = alive + gathered + copied_in + gathered
    at_copy_out = alive + (gathered if both_at_copy_out else 0) + gathered + unsharded
    at_output = alive + gathered + unsharded + 8_192
    return max(at_all_gather, at_copy_out, at_output)


def run_fsdp(tmp_path, monkeypatch, world: int, *args: str) -> dict[str, Any]:
    """The last rank of `world` (the one whose shard is padded when 256 rows do not
    divide evenly)."""
    for key, value in World(world).env(world - 1).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "marks.json"
    run_script(FSDP_SCRIPT, ["--out", str(out), *args], tmp_path / "f.pickle", cublas_workspace=0)
    marks: dict[str, Any] = json.loads(out.read_text())
    return marks


@pytest.mark.parametrize("world", [2, 3, 4])
def test_fully_shard_holds_a_padded_shard_and_all_gathers_one_unit_ahead(
    tmp_path, monkeypatch, world
):
    marks = run_fsdp(tmp_path, monkeypatch, world)
    rows = -(-256 // world)  # torch.chunk's rows per rank: every shard is padded to it
    last = 256 - rows * (world - 1)  # the last rank's own rows
    assert marks["local_rows"] == last
    # each Linear's weight (rows x 256) and bias (rows), fp32, padded, in separate blocks
    shard = r512(rows * 256 * 4) + r512(rows * 4)
    assert marks["sharded"] == 2 * shard
    # per unit, an all-gather output of world x the padded shard (weight and bias in one
    # flat buffer) and the unsharded parameters (world x rows of them, padding included)
    gathered = r512(world * rows * 257 * 4)
    unsharded = r512(world * rows * 256 * 4) + r512(world * rows * 4)
    # reshard_after_forward=True: after forward only the shards and the activations remain
    assert marks["forward"] == 2 * shard + ACTS
    # the forward's peak is in the second unit, where depends on the release (forward_peak):
    # at the copy-out under torch 2.13 and 2.14 (2 * shard + 16,384 + 2 * gathered +
    # unsharded: 1,069,056 at world 2), at the second Linear's output under 2.15
    # (2 * shard + 24,576 + gathered + unsharded: 814,080)
    assert marks["forward_peak"] == forward_peak(2 * shard, gathered, unsharded)
    # after backward: the reduce-scatter outputs are the sharded gradients (one flat
    # buffer per unit, padded like the parameters)
    grads = 2 * r512(rows * 257 * 4)
    assert marks["backward"] == 2 * shard + grads + KEPT
    # AdamW's moments are zeros_like the local shard: the last rank's own rows, no padding
    moments = 2 * 2 * (r512(last * 256 * 4) + r512(last * 4))
    assert marks["step"] == marks["backward"] + moments


def test_reshard_after_forward_false_keeps_the_unsharded_parameters(tmp_path, monkeypatch):
    marks = run_fsdp(tmp_path, monkeypatch, 2, "--keep-unsharded")
    shard, unsharded = 2 * (128 * 1024 + 512), 256 * 1024 + 1024  # both units', one unit's
    gathered = 2 * 128 * 257 * 4
    assert marks["forward"] == shard + 2 * unsharded + ACTS
    # the first unit's unsharded parameters stay through the second unit's
    assert marks["forward_peak"] == forward_peak(shard + unsharded, gathered, unsharded)
    # post-backward reshards them all the same
    assert marks["backward"] == 2 * shard + KEPT


@pytest.mark.parametrize("world", [2, 3])
def test_cpu_offload_keeps_shards_gradients_and_moments_off_the_gpu(tmp_path, monkeypatch, world):
    plain = run_fsdp(tmp_path, monkeypatch, world)
    marks = run_fsdp(tmp_path, monkeypatch, world, "--offload")
    # CPUOffloadPolicy: the padded shards, the gradients (each reduce-scatter output
    # copied to the host in the post-backward, inside autograd's hook for the second
    # unit) and AdamW's moments are host tensors
    assert marks["devices"] == ["cpu"] and plain["devices"] == [f"cuda:{world - 1}"]
    assert marks["sharded"] == 0
    assert marks["forward"] == ACTS
    assert marks["backward"] == marks["step"] == KEPT
    # what comes to the GPU: each unit's all-gather input (its host shard copied there,
    # weight and bias in blocks of their own), all-gather output and unsharded parameters.
    # The peak: at the copy-out under torch 2.13 and 2.14 (16,384 + 3 x 263,168 =
    # 805,888 at world 2, the peak without offload less the two shards), at the second
    # unit's all-gather under 2.15 (16,384 + 2 x 263,168 + 131,584 = 674,304)
    rows = -(-256 // world)
    gathered = r512(world * rows * 257 * 4)
    unsharded = r512(world * rows * 256 * 4) + r512(world * rows * 4)
    shard = r512(rows * 256 * 4) + r512(rows * 4)
    assert marks["forward_peak"] == forward_peak(0, gathered, unsharded, copied_in=shard)
    assert plain["forward_peak"] == forward_peak(2 * shard, gathered, unsharded)


def test_fsdp2_allocates_on_its_own_streams(tmp_path, monkeypatch):
    # FSDP2 makes its streams in this order: all-gather copy-in (1), all-gather (2),
    # reduce-scatter (3), all-reduce (4, HSDP). Each unit's all-gather output (world x
    # the padded shard of weight and bias: 2 x 128 x 257 x 4) is made on the copy-in
    # stream, in forward and again in backward; each reduce-scatter output (the sharded
    # gradients, 128 x 257 x 4) on the reduce-scatter stream; the rest on the default one
    run_fsdp(tmp_path, monkeypatch, 2)
    snapshot = pickle.loads((tmp_path / "f.pickle").read_bytes())
    by_stream: dict[int, list[int]] = {}
    for e in snapshot["device_traces"][0]:
        if e["action"] == "alloc":
            by_stream.setdefault(e["stream"], []).append(e["size"])
    assert by_stream[1] == [263_168] * 4
    assert by_stream[3] == [131_584] * 2
    assert sorted(by_stream) == [0, 1, 3]
    # a stream's blocks come from its own segments: three 2 MiB small-pool segments
    assert sorted((s["stream"], s["total_size"]) for s in snapshot["segments"]) == [
        (0, 2**21), (1, 2**21), (3, 2**21),
    ]  # fmt: skip


PROPAGATION = """
import json, os, sys, torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (4,))
model = torch.nn.Linear(1024, 1024, bias=False)  # built on the host: 4 MiB
parallelize_module(model.cuda(), mesh, ColwiseParallel())
base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
doubled = model.weight * 2  # a DTensor op never run before: its sharding is propagated
marks = {"base": base, "peak": torch.cuda.max_memory_allocated() - base,
         "after": torch.cuda.memory_allocated() - base}
json.dump(marks, open(sys.argv[1], "w"))
"""


def test_dtensor_sharding_propagation_allocates_nothing_on_the_gpu(tmp_path, monkeypatch):
    # DTensor propagates an op's sharding by running it once on fake tensors of the
    # global shape (1024 x 1024 fp32, 4 MiB each for the input and the output) under a
    # FakeTensorMode: on a GPU no memory. The op itself makes the local product alone:
    # rank 3's 256 rows, 1 MiB, as the local weight.
    marks = run_source(tmp_path, monkeypatch, PROPAGATION, 3, World(4))
    assert marks["base"] == 2**20  # the local shard of the weight
    assert marks["peak"] == marks["after"] == 2**20


TWO_D = """
import json, os, sys, torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel, RowwiseParallel, parallelize_module,
)
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
mesh = init_device_mesh("cuda", (2, 2), mesh_dim_names=("dp", "tp"))  # no init_process_group
model = torch.nn.Sequential(
    torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)
).cuda()
parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
fully_shard(model, mesh=mesh["dp"])
marks = {
    "coords": [mesh["dp"].get_local_rank(), mesh["tp"].get_local_rank()],
    "shapes": [list(p.to_local().shape) for p in model.parameters()],
    "devices": sorted({str(p.device) for p in model.parameters()}),
    "sharded": torch.cuda.memory_allocated(),
}
loss = model(torch.randn(8, 256, device="cuda")).sum()
loss.backward()
marks["backward"] = torch.cuda.memory_allocated()
json.dump(marks, open(sys.argv[1], "w"))
"""


def test_fsdp2_with_tensor_parallel_on_a_2d_mesh_shards_a_quarter_per_rank(tmp_path, monkeypatch):
    marks = run_source(tmp_path, monkeypatch, TWO_D, 3, World(4))
    assert marks["coords"] == [1, 1]  # rank 3 of a (dp=2, tp=2) mesh
    # colwise: weight rows and bias split over tp, then dim 0 over dp; rowwise: weight
    # columns over tp, rows over dp; its bias replicated over tp, split over dp
    assert marks["shapes"] == [[64, 256], [64], [128, 128], [128]]
    assert marks["devices"] == ["cuda:3"]
    assert marks["sharded"] == 65_536 + 512 + 65_536 + 512
    # the gradients are sharded like the parameters; the loss stays (x was never named:
    # backward freed it)
    assert marks["backward"] == 2 * marks["sharded"] + 512

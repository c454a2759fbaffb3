"""Issue 22 on a small Llama-style model (tests/simulate/llama_script.py): per-rank
parameter, gradient and AdamW-state bytes under DDP, FSDP2, FSDP1, tensor and sequence
parallel at world sizes 2, 4 and 8 and HSDP over tensor parallel on a 3-D mesh, equal to the sharding arithmetic worked out here
from the model's shapes; DDP's peak equals the single-GPU run's plus its bucket; the
peak against PyTorch's MemTracker / FSDPMemTracker; activation checkpointing, a tied
head, FSDP1's sharding strategies and FSDP2's bf16 mixed precision.

The model (fp32, bias-free Linears): vocab V=250, dim D=64, 8 heads, SwiGLU width FF=176,
2 blocks, untied head. V divides by neither 4 nor 8, so FSDP shards are padded. (FF divides
by 8: tensor parallel's RowwiseParallel rebuilds its input DTensor from the local shards
assuming even ones, so an uneven FF fails there on a GPU too.) Each
simulated rank is the last one of its world (the one whose own rows are fewest).
Every tensor is its own caching-allocator block, rounded up to 512 bytes (r512).
A step of batch 2 x 16 tokens keeps the int64 tokens (256 bytes -> 512) to the end.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.distributed.env import World  # noqa: E402

SCRIPT = str(Path(__file__).with_name("llama_script.py"))
V, D, FF, LAYERS = 250, 64, 176, 2
TOKENS = 512  # 2 x 16 int64 = 256 bytes, one block
F32 = 4


def r512(n: int) -> int:
    """The caching allocator's rounding of a request (512-byte multiples)."""
    return -(-n // 512) * 512


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# (shape, kind) of every parameter, per FSDP unit: a block, then the root's own
# (embedding, final norm, head). kind: how tensor parallel splits it.
BLOCK: Unit = [
    ((D,), "replicate"),  # attention_norm
    ((D, D), "colwise"), ((D, D), "colwise"), ((D, D), "colwise"),  # wq, wk, wv
    ((D, D), "rowwise"),  # wo
    ((D,), "replicate"),  # ffn_norm
    ((FF, D), "colwise"), ((FF, D), "colwise"),  # w1, w3
    ((D, FF), "rowwise"),  # w2
]  # fmt: skip
ROOT: Unit = [((V, D), "replicate"), ((D,), "replicate"), ((V, D), "replicate")]
Unit = list[tuple[tuple[int, ...], str]]
UNITS: list[Unit] = [BLOCK] * LAYERS + [ROOT]
PARAMS = [p for unit in UNITS for p in unit]
# --tied: the head's weight is the embedding's, one parameter (and one gradient, one
# pair of moments) fewer
TIED: list[Unit] = [BLOCK] * LAYERS + [ROOT[:-1]]


def numel(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def fsdp2_rows(rows: int, world: int, rank: int) -> tuple[int, int]:
    """FSDP2 shards dim 0 as torch.chunk does: every rank's shard is padded to the
    first chunk's rows; the last ranks own what is left (possibly nothing)."""
    padded = ceil_div(rows, world)
    return padded, max(0, min(padded, rows - padded * rank))


def tp_local(shape: tuple[int, ...], kind: str, world: int, rank: int) -> tuple[int, ...]:
    """A DTensor's local shard, unpadded (torch.chunk's split): colwise splits a
    Linear's weight on its output rows (dim 0), rowwise on its input columns (dim 1)."""
    if kind == "replicate":
        return shape
    dim = 0 if kind == "colwise" else 1
    chunk = ceil_div(shape[dim], world)
    mine = max(0, min(chunk, shape[dim] - chunk * rank))
    return tuple(mine if d == dim else n for d, n in enumerate(shape))


def expected(mode: str, world: int, units: list[Unit] = UNITS) -> dict[str, int]:
    """Parameter, gradient and AdamW-state bytes on the last rank of `world`."""
    rank = world - 1
    params_ = [p for unit in units for p in unit]
    if mode == "single":  # every parameter, gradient and moment its own block
        params = sum(r512(numel(s) * F32) for s, _ in params_)
        return {"params": params, "grads": params, "state": 2 * params}
    if mode == "ddp":
        # as one GPU; DDP's flat bucket (all parameters in one until the first
        # backward: 530,688 bytes < the 1 MiB first bucket) is counted on its own
        return expected("single", world, units)
    if mode in ("tp", "sp"):  # sequence parallel shards activations, not parameters
        local = sum(r512(numel(tp_local(s, k, world, rank)) * F32) for s, k in params_)
        return {"params": local, "grads": local, "state": 2 * local}
    if mode == "fsdp2":
        return fsdp2_bytes(units, world, rank)
    if mode == "fsdp1":
        # one flat parameter per unit, padded to a multiple of the world size; each
        # rank's shard, its gradient and the two moments are (flat / world) elements
        shards = sum(fsdp1_unit_bytes(world, units))
        return {"params": shards, "grads": shards, "state": 2 * shards}
    raise AssertionError(mode)


def fsdp2_bytes(
    units: list[Unit], shard: int, shard_rank: int, tp: int = 1, tp_rank: int = 0
) -> dict[str, int]:
    """FSDP2 over `shard` ranks (this one `shard_rank`) of each parameter's tensor
    parallel local shard (`tp` ranks; 1: the whole parameter): dim 0 chunked, padded."""
    params = state = grads = 0
    for unit in units:
        flat = 0  # the unit's reduce-scatter output: every padded shard, one buffer
        for shape, kind in unit:
            local = tp_local(shape, kind, tp, tp_rank)
            padded, own = fsdp2_rows(local[0], shard, shard_rank)
            row = numel(local[1:])
            params += r512(padded * row * F32)  # the padded shard, its own block
            state += 2 * r512(own * row * F32)  # zeros_like the unpadded local shard
            flat += padded * row
        grads += r512(flat * F32)  # the sharded gradients are views of it
    return {"params": params, "grads": grads, "state": state}


def simulate(
    tmp_path, monkeypatch, mode: str, world: int, *args: str, nodes: int = 1
) -> dict[str, Any]:
    for key, value in World(world // nodes, nodes).env(world - 1).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / f"{mode}{world}.json"
    run_script(
        SCRIPT, ["--out", str(out), "--mode", mode, *args], tmp_path / f"{mode}.pickle",
        cublas_workspace=0,
    )  # fmt: skip
    marks: dict[str, Any] = json.loads(out.read_text())
    return marks


def measured(marks: dict[str, Any], extra: int = 0) -> dict[str, int]:
    """What each checkpoint adds: after wrapping (parameters, plus `extra` held from
    construction on), after backward with the loss dropped (the gradients, and the
    tokens), after AdamW's step (its two moments; `step` is a host tensor)."""
    return {
        "params": marks["params"] - extra,
        "grads": marks["backward"] - marks["params"] - TOKENS,
        "state": marks["step"] - marks["backward"],
    }


def test_the_arithmetic_is_the_models():
    # the single-GPU bytes by hand: embedding and head 250 x 64 x 4 = 64,000 each,
    # 5 norms of 256 -> 512, 8 attention projections of 16,384, 6 MLP ones of 45,056
    assert expected("single", 1)["params"] == 2 * 64_000 + 5 * 512 + 8 * 16_384 + 6 * 45_056
    # FSDP2, rank 3 of 4: 63 padded rows of the 250 (61 its own); rank 7 of 8: 32 (26)
    assert fsdp2_rows(V, 4, 3) == (63, 61) and fsdp2_rows(V, 8, 7) == (32, 26)
    assert fsdp2_rows(FF, 8, 7) == (22, 22)
    assert tp_local((D, FF), "rowwise", 8, 7) == (64, 22)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict[str, Any]:
    mp = pytest.MonkeyPatch()
    try:
        return simulate(tmp_path_factory.mktemp("single"), mp, "single", 1)
    finally:
        mp.undo()


def test_single_gpu_holds_parameters_gradients_and_two_moments(single):
    assert measured(single) == expected("single", 1)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_ddp_is_the_single_gpu_run_plus_its_bucket(tmp_path, monkeypatch, single, world):
    marks = simulate(tmp_path, monkeypatch, "ddp", world)
    bucket = r512(sum(numel(s) for s, _ in PARAMS) * F32)  # one flat fp32 buffer
    assert bucket == 530_944  # 530,688 bytes of parameters, rounded
    assert measured(marks, extra=bucket) == expected("ddp", world)
    for mark in ("params", "forward", "backward", "step", "peak"):
        assert marks[mark] == single[mark] + bucket, mark


# FSDP1 reads its flat parameter's data_ptr (to compare storages), a fake's answers 0
@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("mode", ["fsdp2", "fsdp1", "tp", "sp"])
def test_sharded_bytes_per_rank_are_the_sharding_arithmetic(tmp_path, monkeypatch, mode, world):
    marks = simulate(tmp_path, monkeypatch, mode, world)
    assert measured(marks) == expected(mode, world)


# A 3-D device mesh, world 8: HSDP (replicate x shard) over tensor parallel, the last
# rank at (1, shard - 1, 1). Tensor parallel splits each weight as above over tp=2; FSDP2
# then chunks dim 0 of that local shard over the shard dimension (padded) and replicates
# it over the replicate one, which adds no bytes. (2, 2, 2): every split is even (the
# embedding's 250 rows: 125 each); (1, 4, 2): 250 rows over 4, padded to 63, 61 own.
@pytest.mark.parametrize("mesh", [(2, 2, 2), (1, 4, 2)])
def test_3d_mesh_hsdp_over_tensor_parallel_shards_by_both(tmp_path, monkeypatch, mesh):
    replicate, shard, tp = mesh
    marks = simulate(tmp_path, monkeypatch, "3d", 8, "--mesh", ",".join(map(str, mesh)))
    want = fsdp2_bytes(UNITS, shard, shard - 1, tp, tp - 1)
    assert measured(marks) == want
    shapes = list(marks["local_shapes"].values())
    # the embedding (replicated by tp), a norm, wq (colwise: 32 rows on each tp rank)
    assert shapes[:3] == [[fsdp2_rows(V, shard, shard - 1)[1], D], [D // shard], [32 // shard, D]]
    if mesh == (2, 2, 2):  # worked by hand: a block's shards are 51,200 bytes, the root's
        # embedding and head 125 x 64 x 4 = 32,000 -> 32,256 each and its norm 512
        assert want == {"params": 167_424, "grads": 165_888, "state": 334_848}


def fsdp1_unit_bytes(shard_over: int, units: list[Unit] = UNITS) -> list[int]:
    """Each FSDP1 unit's flat parameter split `shard_over` ways (padded to a multiple)."""
    return [r512(ceil_div(sum(numel(s) for s, _ in unit), shard_over) * F32) for unit in units]


@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.filterwarnings("ignore:The `NO_SHARD` sharding strategy is deprecated")
@pytest.mark.parametrize(
    ("strategy", "nodes", "shard_over"),
    [
        ("SHARD_GRAD_OP", 1, 4),  # sharded as FULL_SHARD
        ("NO_SHARD", 1, 1),  # every rank the whole flat parameters
        ("HYBRID_SHARD", 2, 4),  # 2 nodes x 4: sharded within a node, replicated across
    ],
)
def test_fsdp1_sharding_strategies(tmp_path, monkeypatch, strategy, nodes, shard_over):
    world = 4 * nodes
    marks = simulate(tmp_path, monkeypatch, "fsdp1", world, "--strategy", strategy, nodes=nodes)
    shards = sum(fsdp1_unit_bytes(shard_over))
    assert measured(marks) == {"params": shards, "grads": shards, "state": 2 * shards}
    if strategy == "SHARD_GRAD_OP":
        # no reshard after forward: both blocks' unsharded flat parameters (the root's
        # is freed when the root's forward ends) stay until backward, on top of what
        # FULL_SHARD holds after forward
        full = simulate(tmp_path, monkeypatch, "fsdp1", world)
        blocks = LAYERS * fsdp1_unit_bytes(1)[0]
        assert marks["forward"] == full["forward"] + blocks


# ---------------------------------------------------------------- PyTorch's own trackers
# MemTracker (FSDPMemTracker under FSDP2) run inside the same simulated step, on the same
# fake tensors and fake process group: it counts live tensor storages, each rounded up to
# 512 bytes as the caching allocator rounds them, and updates its peak after each op.
@pytest.mark.parametrize(
    ("mode", "world", "above"),
    [
        # no difference: both count the same rounded tensors; the peak (AdamW's step)
        # falls between ops
        ("single", 1, 0),
        *[(mode, world, 0) for mode in ("ddp", "tp") for world in (2, 4, 8)],
        # FSDP2: memlens sees every allocation, MemTracker what is alive when an op
        # returns; the peak falls between ops here too, where FSDPMemTracker still
        # counts one or two small blocks the allocator has freed (not isolated). Before
        # silu_backward ran as one kernel (tracker.py's _is_composite), memlens was
        # 96,256 bytes above, its decomposition's temporaries
        ("fsdp2", 2, -1_024),
        ("fsdp2", 4, -2_048),
        ("fsdp2", 8, -2_048),
    ],
)
def test_peak_against_pytorchs_mem_tracker(tmp_path, monkeypatch, mode, world, above):
    import memlens

    marks = simulate(tmp_path, monkeypatch, mode, world, "--tracker")
    if mode == "tp":
        # the first tensor-parallel step in a process: MemTracker counts 29,184 bytes more
        # optimizer memory at tp 2 (cuda OPT 820,224 vs 791,040) than on any later step,
        # while memlens's allocator holds the same in both (DTensor's first-time dispatch,
        # its C++ fast path's cache; not traced further). Compared on a later step, which
        # does not depend on which tests ran before in this worker
        again = simulate(tmp_path, monkeypatch, mode, world, "--tracker")
        assert again["peak"] == marks["peak"] and marks["tracker_peak"] >= again["tracker_peak"]
        marks = again
    assert marks["peak"] - marks["tracker_peak"] == above
    # caching: the allocator reserves whole segments (2 MiB of its small-block pool, or
    # two for the single-GPU and DDP runs, one per stream under FSDP2: the default, the
    # all-gather copy-in and the reduce-scatter streams), which MemTracker does not model
    reserved = memlens.load(tmp_path / f"{mode}.pickle").device(0).peak_reserved_bytes
    segments = {"single": 2, "ddp": 2, "fsdp2": 3, "tp": 1}[mode]
    assert reserved == segments * 2**21


# ---------------------------------------------------------------- activation checkpointing
# checkpoint_wrapper around every block, under each parallelism: the sharding arithmetic
# is unchanged, the forward keeps less, and DDP stays the single-GPU run plus its bucket.
@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("mode", ["fsdp2", "fsdp1", "tp"])
def test_checkpointed_blocks_shard_the_same_and_keep_less(tmp_path, monkeypatch, mode):
    plain = simulate(tmp_path, monkeypatch, mode, 4)
    checkpointed = simulate(tmp_path, monkeypatch, mode, 4, "--checkpoint")
    assert measured(checkpointed) == expected(mode, 4)
    assert checkpointed["forward"] < plain["forward"]


def test_checkpointed_ddp_is_the_checkpointed_single_gpu_run_plus_its_bucket(tmp_path, monkeypatch):
    single = simulate(tmp_path, monkeypatch, "single", 1, "--checkpoint")
    ddp = simulate(tmp_path, monkeypatch, "ddp", 4, "--checkpoint")
    bucket = r512(sum(numel(s) for s, _ in PARAMS) * F32)
    for mark in ("params", "forward", "backward", "step", "peak"):
        assert ddp[mark] == single[mark] + bucket, mark


# ---------------------------------------------------------------- a tied head, bf16 FSDP2
@pytest.mark.filterwarnings("ignore:Accessing the data pointer of FakeTensor")
@pytest.mark.parametrize("mode", ["single", "ddp", "fsdp2", "fsdp1", "tp"])
def test_a_tied_head_is_one_parameter_fewer_everywhere(tmp_path, monkeypatch, mode):
    world = 1 if mode == "single" else 4
    marks = simulate(tmp_path, monkeypatch, mode, world, "--tied")
    if mode != "fsdp1":  # FSDP1 names its flat parameters alone
        assert len(marks["local_shapes"]) == len(PARAMS) - 1
    bucket = r512(sum(numel(s) for unit in TIED for s, _ in unit) * F32) if mode == "ddp" else 0
    assert measured(marks, extra=bucket) == expected(mode, world, TIED)


def test_fsdp2_bf16_mixed_precision_keeps_fp32_shards_gradients_and_moments(tmp_path, monkeypatch):
    # MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): only the unsharded
    # parameters (and so the activations) are bf16
    plain = simulate(tmp_path, monkeypatch, "fsdp2", 4)
    mixed = simulate(tmp_path, monkeypatch, "fsdp2", 4, "--bf16")
    assert measured(mixed) == expected("fsdp2", 4)
    assert mixed["forward"] < plain["forward"] and mixed["peak"] < plain["peak"]


def test_sequence_parallel_keeps_less_after_forward_than_tensor_parallel(tmp_path, monkeypatch):
    tp = simulate(tmp_path, monkeypatch, "tp", 4)
    sp = simulate(tmp_path, monkeypatch, "sp", 4)
    # the residual stream and what the RMSNorms save for backward are sharded on the
    # sequence (a quarter of the 16 tokens on each rank): less kept after forward;
    # parameters, gradients, moments and the peak (AdamW's step) are tensor parallel's
    assert sp["forward"] < tp["forward"]
    assert (sp["backward"], sp["step"], sp["peak"]) == (tp["backward"], tp["step"], tp["peak"])


SILU = """
import torch
x = torch.randn(64, 1024, device="cuda", requires_grad=True)
y = torch.nn.functional.silu(x)
y.backward(torch.ones_like(y))
"""


def test_silu_backward_runs_as_one_kernel_allocating_its_output(tmp_path):
    # x, y, the ones and x.grad (262,144 bytes each): silu_backward's CUDA kernel writes
    # grad_input alone; its CompositeImplicitAutograd form would add four temporaries
    import pickle

    (tmp_path / "silu.py").write_text(SILU)
    run_script(tmp_path / "silu.py", [], tmp_path / "s.pickle", cublas_workspace=0)
    trace = pickle.loads((tmp_path / "s.pickle").read_bytes())["device_traces"][0]
    assert [e["size"] for e in trace if e["action"] == "alloc"] == [262_144] * 4

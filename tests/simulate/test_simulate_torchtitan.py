"""torchtitan 0.3.0's llama3 debug model, unedited, under `memlens simulate` (issue 36):
each rank's parameters, gradients and optimizer state at the end of the run, to the byte.

The model (torchtitan/models/llama3 `_debugmodel`): dim 256, 6 layers of a fused wqkv
(768 x 256), wo (256 x 256), w1 and w3 (768 x 256), w2 (256 x 768) and two RMSNorm
weights (256); tok_embeddings and lm_head of 2,048 x 256 and the final norm (256):
P = 6 x 852,480 + 2 x 524,288 + 256 = 6,163,712 elements in 45 tensors (torchtitan prints
this count). FSDP2 shards every tensor on its first dimension; every first dimension
(256, 768, 2,048) divides by 4, so a rank of N (N = 1 or 4) holds P/N elements of each
without padding, in fp32 (4 bytes):
  - parameters (made by `to_empty` on the sharded meta model): 4P/N bytes;
  - gradients (FSDP2's reduce-scatter outputs, fp32 reduce dtype, on its reduce-scatter
    stream; the last step's are alive at the end): 4P/N bytes;
  - AdamW (torchtitan's default is fused): exp_avg and exp_avg_sq, 8P/N bytes, and one
    0-d fp32 `step` tensor per parameter tensor, 45 x 4 bytes.
1 rank: 24,654,848 + 24,654,848 + 49,309,876; 4 ranks: 6,163,712 + 6,163,712 + 12,327,604.
The same at 1 and 4 ranks with `--compile.enable` (torchtitan compiles each block and the loss;
FSDP2's hooks and AdamW stay eager).
TP 2 x FSDP 2 (4 ranks): tensor parallel splits every linear and embedding weight in two
(wqkv, w1, w3, lm_head and the embedding on their first dimension, wo and w2 on their
second), FSDP2 then halves the first dimension, so those are a quarter each; the 13
RMSNorm weights are whole under TP (sequence parallel) and halved by FSDP2 only (128):
(P - 13 x 256)/4 + 13 x 128 = 1,541,760 elements, so 6,167,040 + 6,167,040 + 12,334,260.
PP 2 x FSDP 2 (4 ranks), with each pipeline schedule torchtitan offers: each rank holds
half of its stages' tensors, the stages split as the schedule has torchtitan split them
(PIPELINES below; the last stage's ranks may keep one more lm_head gradient shard).

torchtitan and what it imports (tyro, torchdata, datasets, tensorboard, triton, ...) are
not memlens's dependencies: the test runs where they are importable, or where
MEMLENS_SIM_TRAINERS_PATH names the directory `scripts/setup_sim_trainers.sh` installed
them into (docs/simulation.md); else it skips. Cost on a loaded 2-core machine: about
2 minutes at 1 rank (7 compiled, on a loaded one) and 4 for each 4-rank job (ranks 0 and
3 simulated), alone on the machine; each pipeline job 3.5 to 7.5 minutes (PIPELINES,
ZERO_BUBBLE), every rank simulated.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torchtitan_assets  # noqa: E402  (beside this file: on sys.path under pytest)

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SRC = Path(__file__).resolve().parents[2] / "src"
TRAIN = Path(__file__).with_name("torchtitan_train.py")
EXTRA = os.environ.get("MEMLENS_SIM_TRAINERS_PATH", "")
# torchtitan's own command line: its llama3 debug model, two short steps, no checkpoint,
# no validation; DTensor for the parallel axes only (its default "spmd_types" backend
# needs a newer fully_shard than torch 2.13 and 2.14 have: docs/simulation.md); no CUDA
# graphs (torchtitan's default, refused by the simulation: docs/simulation.md)
TITAN_ARGS = [
    "--module", "llama3", "--config", "llama3_debugmodel",
    "--training.steps", "2", "--training.seq_len", "128", "--training.local_batch_size", "2",
    "--validator.no-enable", "--checkpoint.no-enable", "--training.disable-cuda-graphs",
    "--parallelism.spmd_backend", "partial_dtensor",
]  # fmt: skip
P = 6 * 852_480 + 2 * 524_288 + 256
TENSORS = 45
NORMS = 13  # RMSNorm weights of 256: two per layer and the final norm
TP2 = ["--parallelism.tensor_parallel_degree", "2"]
# name: (ranks, torchtitan's extra options, elements a rank holds)
CASES = {
    "fsdp1": (1, [], P),
    # torch.compile on (each TransformerBlock and the loss, torchtitan's `--compile.enable`):
    # the same state; what compiling changes is the activations, not checked here
    "fsdp1-compiled": (1, ["--compile.enable"], P),
    "fsdp4": (4, [], P // 4),
    "fsdp4-compiled": (4, ["--compile.enable"], P // 4),
    "tp2-fsdp2": (4, TP2, (P - NORMS * 256) // 4 + NORMS * 128),
    # compiled under TP: the vocab-parallel loss's graph ran into a value dropped early
    # (test_simulate_fused_order.py); 8 minutes
    "tp2-fsdp2-compiled": (4, [*TP2, "--compile.enable"], (P - NORMS * 256) // 4 + NORMS * 128),
}


# PP 2 x FSDP 2 (4 ranks, every pipeline schedule torchtitan offers): torchtitan splits the
# debug model's 6 layers into stages counting tok_embeddings and [norm, lm_head] as one
# layer each (8 "layers"; `_generate_llm_fqn_per_model_part`): 2 stages of 4 for a
# single-stage schedule (one stage per PP rank), 4 stages of 2 for a multi-stage one (two
# per PP rank). Stage -> (elements, tensors) before FSDP, which then halves each tensor:
LAYER = 852_480  # one TransformerBlock: 7 tensors
EMBEDDING = 2048 * 256  # tok_embeddings, lm_head
STAGES = {
    2: [(EMBEDDING + 3 * LAYER, 1 + 3 * 7), (3 * LAYER + 256 + EMBEDDING, 3 * 7 + 2)],
    4: [(EMBEDDING + LAYER, 8), (2 * LAYER, 14), (2 * LAYER, 14), (LAYER + 256 + EMBEDDING, 9)],
}
# Which stages a PP rank holds (`_get_pp_rank_to_stage_indices_mapping`): looped
# schedules give PP rank r stages r and r + 2. The mesh puts PP outermost: ranks 0-1 are
# PP rank 0, ranks 2-3 PP rank 1.
SINGLE, LOOPED = ((0,), (1,)), ((0, 2), (1, 3))
# The ranks holding the last stage may keep one more lm_head shard (2,048 x 256 / 2 fp32)
# of gradients, and so would a GPU: torchtitan's chunked loss runs lm_head's backward
# inside the stage's forward, where FSDP2 reduce-scatters it at once unless the pipeline
# has put the module under no-sync, which it does at the stage's first backward of the
# step (`backward_maybe_with_nosync`) and lifts at its REDUCE_GRAD; the norm's gradient
# comes from the stage's backward, under no-sync. So when a forward of the last stage
# runs after that stage's first backward (1F1B-like orders), the first microbatch's
# reduce-scatter carries lm_head's gradient alone (its output becomes lm_head's sharded
# gradient) and the final one lm_head's (accumulated since, added into the first) and the
# norm's, kept as FSDP2 keeps every new sharded gradient: a view into the flat
# reduce-scatter output (`foreach_reduce`'s `as_strided`), which keeps the whole
# 1,049,088-byte block alive for 512 bytes of norm gradient until the next zero_grad.
# When every forward of the last stage comes first (GPipe, LoopedBFS), each reduce-
# scatter of the forwards carries lm_head alone and the last one the norm alone: no extra.
LM_HEAD_SHARD_BYTES = 4 * 2048 * 256 // 2
PP2 = ["--parallelism.pipeline_parallel_degree", "2"]
# case -> (schedule, the stages of PP ranks 0 and 1, torchtitan's other options, whether
# the last stage keeps the extra lm_head shard, cost): two microbatches (local batch 2,
# microbatch 1). Cost: the job's wall time on a loaded 2-core machine, every rank
# simulated at once (a stage waits for its peer's shapes).
PIPELINES = {
    "GPipe": ("GPipe", SINGLE, [], False, "4.5 minutes"),
    "1F1B": ("1F1B", SINGLE, [], True, "5.5 minutes"),
    "Interleaved1F1B": ("Interleaved1F1B", LOOPED, [], True, "3.5 minutes"),  # the debug config's
    "LoopedBFS": ("LoopedBFS", LOOPED, [], False, "5 minutes"),
    # torch.compile on: the same state (what compiling changes is the activations)
    "Interleaved1F1B-compiled": (
        "Interleaved1F1B",
        LOOPED,
        ["--compile.enable"],
        True,
        "6.5 minutes",
    ),
}
# The zero-bubble schedules split each backward into the inputs' gradients
# (`stage_backward_input`, autograd.grad with retain_graph=True) and the weights'. With
# the debug model they stop at the first such backward, and would on a GPU (torch's
# code, which runs unchanged here; not tried on one): torchtitan compiles flex_attention
# (one compiled function for every layer), and the pipeline's shape inference
# (torchtitan gives its stages no shapes) runs one forward and backward per stage first,
# with retain_graph=False, so AOTAutograd compiles flex_attention's backward with
# donated buffers; a retain_graph backward through it is then refused
# ("compiled with non-empty donated buffers", torch's check; pytorch/pytorch#161904).
# torchtitan's command line has no option to turn donation off (turned off by a wrapper,
# the ranks stop next, in the weights' half, on torch's selective activation
# checkpointing, which allows one backward per checkpointed region: "Trying to backward
# an extra time"). DualPipeV needs as many microbatches as stages (4). Cost: 4.5, 6 and
# 7.5 minutes.
ZERO_BUBBLE = {
    "InterleavedZeroBubble": [],
    "ZBVZeroBubble": [],
    "DualPipeV": ["--training.local_batch_size", "4"],
}


def _torchtitan_importable() -> bool:
    code = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torchtitan') is None)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (EXTRA,) if p)}
    return subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


if not _torchtitan_importable():
    pytest.skip(
        "torchtitan is not installed (scripts/setup_sim_trainers.sh, then set "
        "MEMLENS_SIM_TRAINERS_PATH)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def assets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return torchtitan_assets.write(tmp_path_factory.mktemp("torchtitan"))


def simulate(
    root: Path, nproc: int, out: str, extra: list[str], ranks: tuple[str, ...] = ("--workers", "2")
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), EXTRA) if p)}
    return subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "--nproc-per-node", str(nproc),
         *ranks, "-o", out, str(TRAIN), *TITAN_ARGS, *extra],
        capture_output=True, text=True, cwd=root, env=env, timeout=1800,
    )  # fmt: skip


def category(frames: list[dict[str, Any]], stream: int) -> str | None:
    """Which of the three an allocation is, by the functions on its stack."""
    on_stack = {(f["filename"].replace("\\", "/").rsplit("/", 1)[-1], f["name"]) for f in frames}
    if ("module.py", "to_empty") in on_stack:
        return "parameters"
    if ("adam.py", "_init_group") in on_stack:
        return "optimizer"
    # FSDP2's reduce-scatter output (on its own stream); its input is on the default one
    if ("_fsdp_collectives.py", "foreach_reduce") in on_stack and stream != 0:
        return "gradients"
    return None


def alive_at_end(snapshot: dict[str, Any]) -> Counter[str]:
    """Bytes of each category still allocated at the end of the trace (requested sizes)."""
    live: dict[int, tuple[str, int]] = {}
    for entry in snapshot["device_traces"][0]:
        if entry["action"] == "alloc":
            kind = category(entry.get("frames") or [], entry["stream"])
            if kind is not None:
                live[entry["addr"]] = (kind, entry["size"])
        elif entry["action"] == "free_completed":
            live.pop(entry["addr"], None)
    totals: Counter[str] = Counter()
    for kind, size in live.values():
        totals[kind] += size
    return totals


@pytest.mark.parametrize("case", list(CASES))
def test_llama3_debug_model_state_per_rank_to_the_byte(assets, case):
    nproc, extra, shard = CASES[case]
    done = simulate(assets, nproc, case, extra)
    assert done.returncode == 0, done.stderr[-4000:]
    # every compiled graph (flex_attention's; with --compile.enable each block and the
    # loss) ran as compiled: no eager fallback
    assert "ran eagerly" not in done.stderr
    ranks = sorted((assets / case).glob("rank*.pickle"))
    # by default the first and the last rank are simulated (the others run the same)
    assert [r.name for r in ranks] == sorted({"rank0.pickle", f"rank{nproc - 1}.pickle"})
    for path in ranks:
        with open(path, "rb") as f:
            snapshot = pickle.load(f)
        assert alive_at_end(snapshot) == {
            "parameters": 4 * shard,
            "gradients": 4 * shard,
            "optimizer": 8 * shard + 4 * TENSORS,
        }, path.name


@pytest.mark.parametrize("case", list(PIPELINES))
def test_llama3_pipeline_schedule_state_per_rank_to_the_byte(assets, case):
    schedule, stages, extra, head_extra, _cost = PIPELINES[case]
    out = f"pp2-fsdp2-{case}"
    options = [*PP2, "--parallelism.pipeline_parallel_schedule", schedule, *extra]
    # every rank at once: a stage waits for its peer's shapes (docs/simulation.md)
    done = simulate(assets, 4, out, options, ("--ranks", "all", "--workers", "4"))
    assert done.returncode == 0, done.stderr[-4000:]
    assert "ran eagerly" not in done.stderr
    split = STAGES[2 * len(stages[0])]
    for rank in range(4):
        held = stages[rank // 2]
        shard = sum(split[s][0] for s in held) // 2
        tensors = sum(split[s][1] for s in held)
        last_stage = head_extra and len(split) - 1 in held
        last_stage_extra = LM_HEAD_SHARD_BYTES if last_stage else 0
        with open(assets / out / f"rank{rank}.pickle", "rb") as f:
            snapshot = pickle.load(f)
        assert alive_at_end(snapshot) == {
            "parameters": 4 * shard,
            "gradients": 4 * shard + last_stage_extra,
            "optimizer": 8 * shard + 4 * tensors,
        }, rank


@pytest.mark.parametrize("schedule", list(ZERO_BUBBLE))
def test_llama3_zero_bubble_schedules_stop_as_on_a_gpu(assets, schedule):
    options = [*PP2, "--parallelism.pipeline_parallel_schedule", schedule, *ZERO_BUBBLE[schedule]]
    done = simulate(
        assets, 4, f"pp2-fsdp2-{schedule}", options, ("--ranks", "all", "--workers", "4")
    )
    assert done.returncode != 0
    assert "all 4 simulated ranks failed" in done.stderr, done.stderr[-4000:]
    assert "compiled with non-empty donated buffers" in done.stderr, done.stderr[-4000:]

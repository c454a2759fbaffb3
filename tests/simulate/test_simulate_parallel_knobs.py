"""The `fsdp2=N` and `ddp=N` what-if knobs (simulation/knobs/parallel.py): an unedited
single-GPU script simulated as rank 0 of N, its model wrapped at its first optimizer.

The script (tests/parallel_script.py): Linear(256, 256), ReLU, Linear(256, 256) in fp32
(tests/simulate/fsdp_script.py's model, unwrapped), AdamW (foreach=False), two steps of
batch 8. Its
parameters P are two 262,144-byte weights and two 1,024-byte biases: P = 526,336 bytes.
A step keeps x (8,192) and the loss (4 bytes -> a 512-byte block) until the loop drops
them; `memory_allocated()` at each mark is written to a JSON file.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from memlens.errors import MemlensError  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.distributed.env import World  # noqa: E402
from memlens.simulation.knobs.code import CodeKnob, applied  # noqa: E402
from memlens.simulation.knobs.parallel import largest_repeated as _units  # noqa: E402
from parallel_script import SCRIPT  # noqa: E402

P = 2 * 262_144 + 2 * 1_024
KEPT = 8_192 + 512  # x and the loss


def r512(n: int) -> int:
    return -(-n // 512) * 512


def run(tmp_path, knobs: list[str], *args: str) -> tuple[int, list[str], dict[str, Any]]:
    """(peak active bytes, the knobs' report, the marks) of SCRIPT under `knobs`."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT))
    out = tmp_path / "marks.json"
    with applied(knobs) as patched:
        r = run_script(str(script), [str(out), *args], tmp_path / "o.pickle", cublas_workspace=0)
    return r.sim.allocator.peak_allocated, patched.report(None), json.loads(out.read_text())


BASELINE_PEAK = (
    # AdamW's step on the second weight: parameters, gradients and both moments (4P),
    # x and the loss, the first bias's `denom` (the loop's variable, 1,024) and the
    # weight's exp_avg_sq.sqrt() and its quotient (two 262,144-byte temporaries)
    4 * P + KEPT + 1_024 + 2 * 262_144
)


def test_baseline_peak_by_hand(tmp_path):
    peak, report, marks = run(tmp_path, [])
    assert peak == BASELINE_PEAK == 2_639_360
    assert marks["step0"] == 4 * P + KEPT and marks["zero_grad0"] == 3 * P + KEPT
    assert report == []


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("groups", [False, True])
def test_fsdp2_shards_parameters_gradients_and_adam_state(tmp_path, world, groups):
    env = dict(os.environ)
    peak, report, marks = run(tmp_path, [f"fsdp2={world}"], *(["--groups"] if groups else []))
    assert dict(os.environ) == env  # rank 0's torchrun variables are put back
    rows = 256 // world  # rank 0's rows of each Linear (256 divides: no padding)
    shard = r512(rows * 256 * 4) + r512(rows * 4)  # one Linear's weight and bias shards
    assert marks["class"] == "FSDPSequential"
    # the unsharded parameters are freed when fully_shard replaces them
    assert marks["model"] == P and marks["optimizer"] == 2 * shard
    # after the step: shards, sharded gradients (one reduce-scatter output of
    # rows x 257 floats per Linear, the flat buffer the gradients view), AdamW's moments
    # (zeros_like each local shard, in separate blocks), x and the loss
    grads = 2 * r512(rows * 257 * 4)
    moments = 2 * 2 * shard
    assert marks["step0"] == 2 * shard + grads + moments + KEPT
    assert marks["zero_grad1"] == 2 * shard + moments + KEPT
    # The peak: the second step's backward of the first Linear, when its parameters come
    # back: the shards and moments, x, the loss and its gradient (512), the second
    # Linear's reduce-scatter input (its unsharded gradients, 256 x 257 floats, kept
    # until the next reduce-scatter) and output, ReLU's gradient (8,192), and the first
    # Linear's all-gather output (world x rows x 257 floats) with its unsharded weight
    # and bias
    assert peak == (
        2 * shard + moments + KEPT + 512
        + r512(256 * 257 * 4) + r512(rows * 257 * 4)
        + 8_192
        + r512(world * rows * 257 * 4) + 262_144 + 1_024
    )  # fmt: skip
    assert peak == {2: 1_728_000, 4: 1_269_248}[world]
    assert report == [
        f"fsdp2={world}: fully_shard on Linear x2, then the root Sequential (131,584 "
        f"parameters; rank 0 of {world}, per-GPU batch as the script's; the optimizer "
        "built after the model)"
    ]


def test_ddp_adds_one_bucket_of_every_gradient(tmp_path):
    base = run(tmp_path, [])
    peak, report, marks = run(tmp_path, ["ddp=2"])
    assert marks["class"] == "Sequential"  # the script's module, its calls routed via DDP
    # the reducer's flat bucket (gradient_as_bucket_view=False; P < the 1 MiB first
    # bucket after the rebuild) is alive from the optimizer on: P more at every mark,
    # so the reducer did run (the script's calls went through DDP's forward)
    for mark in base[2]:
        if mark not in ("model", "class"):
            assert marks[mark] == base[2][mark] + P, mark
    assert peak == BASELINE_PEAK + P
    assert report == [
        "ddp=2: DistributedDataParallel(Sequential) of 131,584 parameters (rank 0 of 2, "
        "per-GPU batch as the script's; the optimizer built after the model)"
    ]


def test_not_applied_says_why(tmp_path):
    # the optimizer built while the model is on the CPU: nothing to wrap on the GPU
    peak, report, _ = run(tmp_path, ["fsdp2=2"], "--late-cuda")
    assert peak == BASELINE_PEAK
    assert report == [
        "fsdp2=2: not applied: the model's parameters are on cpu when the optimizer is built"
    ]
    script = tmp_path / "none.py"
    script.write_text("import torch\nx = torch.empty(1024, device='cuda')\n")
    with applied(["ddp=8"]) as patched:
        run_script(str(script), [], tmp_path / "n.pickle", cublas_workspace=0)
    assert patched.report(None) == ["ddp=8: not applied: no torch.optim optimizer was constructed"]


def test_fsdp2_units_named_by_a_regex(tmp_path):
    # every Linear a unit, as the default picks: the same bytes
    auto = run(tmp_path, ["fsdp2=2"])[0]
    peak, report, _ = run(tmp_path, ["fsdp2=2:Lin.*"])
    assert peak == auto
    assert report[0].startswith("fsdp2=2:Lin.*: fully_shard on Linear x2, then the root")
    peak, report, _ = run(tmp_path, ["fsdp2=2:Block"])
    assert peak == BASELINE_PEAK
    assert report == ["fsdp2=2:Block: not applied: no module class under Sequential matched "
                      "'Block' (classes: Linear, ReLU)"]  # fmt: skip


def test_a_script_that_distributes_itself_is_left_alone(tmp_path):
    ddp = str(Path(__file__).with_name("ddp_script.py"))
    out = tmp_path / "m.json"
    with applied(["fsdp2=2"]) as patched:
        run_script(ddp, ["--out", str(out), "--steps", "1"], tmp_path / "d.pickle",
                   cublas_workspace=0)  # fmt: skip
    assert patched.report(None) == [
        "fsdp2=2: not applied: the script starts torch.distributed itself"
    ]
    assert json.loads(out.read_text())["world"] == 2  # rank 0 of the knob's world


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.up, self.down = torch.nn.Linear(8, 32), torch.nn.Linear(32, 8)


class Model(torch.nn.Module):
    def __init__(self, head: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 8)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(3)])
        self.norm = torch.nn.LayerNorm(8)
        self.head = torch.nn.Linear(8, head)


def test_units_are_the_outermost_repeated_class():
    # Linear and LayerNorm repeat too, but inside the blocks: a head larger than all
    # the blocks together (8 x 10,000) does not make every Linear a unit
    model = Model(10_000)
    assert _units(model) == list(model.blocks)
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    assert _units(seq) == [seq[0], seq[2]]
    assert _units(torch.nn.Linear(4, 4)) == []  # nothing repeated: the root alone


def test_parallel_knob_specs():
    assert CodeKnob.parse(" fsdp2 = 4 ").spec == "fsdp2=4"
    assert CodeKnob.parse("fsdp2=8:Decoder.*").spec == "fsdp2=8:Decoder.*"  # case kept
    for bad in ("fsdp2=0", "ddp=two", "ddp=", "ddp=2:Block", "fsdp2=2:"):
        with pytest.raises(MemlensError, match="expected (fsdp2|ddp)=N"):
            CodeKnob.parse(bad)
    with pytest.raises(MemlensError, match="bad regex"):
        CodeKnob.parse("fsdp2=2:(")
    with pytest.raises(MemlensError, match="two ways to wrap"), applied(["fsdp2=2", "ddp=2"]):
        pass


LLAMA = Path(__file__).with_name("llama_script.py")


def llama(tmp_path, knobs: list[str], mode: str, world: int, *args: str) -> tuple[int, Any]:
    """(the allocator's peak, the marks) of rank 0 of tests/simulate/llama_script.py."""
    saved = dict(os.environ)
    if mode != "single":  # the script's own torch.distributed: torchrun's rank 0
        os.environ.update(World(world).env(0))
    try:
        with applied(knobs):
            r = run_script(LLAMA, ["--out", str(tmp_path / "l.json"), "--mode", mode, *args],
                           tmp_path / "l.pickle", cublas_workspace=0)  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(saved)
    marks = json.loads((tmp_path / "l.json").read_text())
    return r.sim.allocator.peak_allocated, [marks[k] for k in ("forward", "backward", "step")]


@pytest.mark.parametrize(
    ("knob", "args"),
    [("fsdp2=2", ()), ("fsdp2=4", ("--tied",)), ("fsdp2=2", ("--checkpoint",)), ("ddp=2", ())],
)
def test_the_knob_equals_the_script_wrapping_its_model_itself(tmp_path, knob, args):
    # llama_script.py --mode fsdp2 / ddp wraps its model as the knob does (fully_shard on
    # every block, or on every checkpoint_wrapper of one, then the root; DDP with its
    # defaults) before building AdamW: the unwrapped --mode single under the knob holds
    # the same bytes at every mark and at the peak, to the byte
    key, world = knob.split("=")
    assert llama(tmp_path, [knob], "single", int(world), *args) == llama(
        tmp_path, [], key, int(world), *args
    )

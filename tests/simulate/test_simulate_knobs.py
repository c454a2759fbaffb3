"""The code knobs of `memlens plan --what-if` (simulation.knobs): each applied to a tiny
script whose memory is worked out by hand, and each saying when it did not apply."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("torch")

import torch  # noqa: E402

from knob_scripts import ADAM, ATTENTION, MLP  # noqa: E402
from memlens.errors import MemlensError  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.knobs.code import CodeKnob, applied, is_code_knob  # noqa: E402

MiB, KiB = 2**20, 2**10


def run(tmp_path, source: str, knobs: list[str], *args: str) -> tuple[int, list[str]]:
    """(peak active bytes, the knobs' report) of `source` under `knobs`."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    with applied(knobs) as patched:
        r = run_script(str(script), list(args), tmp_path / "out.pickle", cublas_workspace=0,
                       gpu="h100")  # fmt: skip
    return r.sim.allocator.peak_allocated, patched.report(r.sim.sdpa_backends)


def test_checkpoint_keeps_only_each_blocks_input(tmp_path):
    # Without: each block keeps its relu output r (2 MiB, saved by relu and the second
    # linear) and its output (the next block's saved input). The peak is the last block's
    # relu, its hidden h and r both live: 8 + 0.5 (x) + 3 x (2 + 0.5) + 2 + 2 = 20 MiB.
    assert run(tmp_path, MLP, [])[0] == 20 * MiB
    # Checkpointed: earlier blocks keep only their outputs (the next block's checkpoint
    # input): 8 + 0.5 + 3 x 0.5 + 2 + 2 = 14 MiB; 6 MiB saved = three relu outputs.
    peak, report = run(tmp_path, MLP, ["checkpoint=Block"])
    assert peak == 14 * MiB
    assert report == ["checkpoint=Block: forward checkpointed (use_reentrant=False): Block x4"]
    assert run(tmp_path, MLP, ["checkpoint=B.*k"])[0] == 14 * MiB  # a regex, fully matched
    # checkpoint=auto (advise --script, no class named): the model's repeated class, Block
    peak, report = run(tmp_path, MLP, ["checkpoint=auto"])
    assert peak == 14 * MiB
    assert report == ["checkpoint=auto: forward checkpointed (use_reentrant=False): Block x4"]


def test_checkpoint_that_matches_nothing_says_so(tmp_path):
    peak, report = run(tmp_path, MLP, ["checkpoint=Lock"])
    assert peak == 20 * MiB
    assert report == [  # torch.relu is a function, not a module
        "checkpoint=Lock: not applied: no module class matched 'Lock' with grad on "
        "(classes called: Block, Linear, Sequential)"
    ]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_autocast_halves_activations_and_caches_weight_casts(tmp_path, dtype):
    # Under autocast every linear casts its weight (0.5 MiB, kept: cached and saved for
    # backward) and the first its input x (256 KiB); hidden and relu outputs are 1 MiB,
    # block outputs 256 KiB. At the last block's relu (its second weight not cast yet):
    # 8 + 0.5 (x) + 0.25 (x cast) + 7 x 0.5 (casts) + 3 x (1 + 0.25) + 1 + 1 = 18 MiB.
    peak, report = run(tmp_path, MLP, [f"autocast={dtype}"])
    assert peak == 18 * MiB
    assert report == [f"autocast={dtype}: 1 outermost module calls under torch.autocast('cuda'); "
                      "code outside modules ran as written"]  # fmt: skip


def test_zero_grad_zeros_keeps_gradients_into_the_next_step(tmp_path):
    # Two SGD steps. The peak is the backward of the last block: 8 (params) + 0.5 (x) +
    # 9.5 (saved: four relu outputs, three block outputs) + 1 (its weight's new grad) + 2
    # (grad of r) + 2 (relu's grad) = 23 MiB, plus the loss and its grad (512 B each)...
    base, _ = run(tmp_path, MLP, [], "--steps", "2")
    assert base == 23 * MiB + KiB
    # ... with zeros, step 2 starts with all 8 MiB of gradients alive; the new 1 MiB
    # gradient of the last weight is added into its kept one and freed: + 8 - 1 MiB.
    peak, report = run(tmp_path, MLP, ["zero_grad=zeros"], "--steps", "2")
    assert peak == base + 7 * MiB
    assert report == ["zero_grad=zeros: 2 zero_grad calls with set_to_none=False; the "
                      "script's own set_to_none=True x2 overridden"]  # fmt: skip
    peak, report = run(tmp_path, MLP, ["zero_grad=none"])
    assert report == ["zero_grad=none: not applied: zero_grad was never called"]


def test_optimizer_foreach_and_fused(tmp_path):
    # foreach (the default on cuda): _foreach_sqrt of all four exp_avg_sq at once: +4 MiB
    assert run(tmp_path, ADAM, [])[0] == 20 * MiB
    assert run(tmp_path, ADAM, ["foreach=true"])[0] == 20 * MiB
    # a loop over the parameters: the previous parameter's denom, this one's sqrt and
    # the quotient are live together: +3 MiB
    peak, report = run(tmp_path, ADAM, ["foreach=false"])
    assert peak == 19 * MiB
    assert report == ["foreach=false: 1 optimizers (Adam)"]
    # fused: no temporaries, but the step counts live on the device (4 x 512 B blocks)
    assert run(tmp_path, ADAM, ["fused=true"])[0] == 16 * MiB + 4 * 512
    _, report = run(tmp_path, MLP, ["fused=true"])
    assert report == ["fused=true: not applied: no torch.optim optimizer taking fused= was "
                      "constructed"]  # fmt: skip


def test_sdpa_backend_forced(tmp_path):
    flash, report = run(tmp_path, ATTENTION, ["sdpa=flash"])
    assert report == ["sdpa=flash: scaled_dot_product_attention calls took flash x1"]
    assert run(tmp_path, ATTENTION, [])[0] == flash  # flash is the H100's first choice
    # memory-efficient: q and its output (1 MiB each), logsumexp (B, H, S) fp32 = 32 KiB
    peak, report = run(tmp_path, ATTENTION, ["sdpa=efficient"])
    assert peak == 2 * MiB + 32 * KiB
    assert report == ["sdpa=efficient: scaled_dot_product_attention calls took efficient x1"]
    # math materialises (B, H, S, S) fp16 scores and their softmax: 16 MiB each at least
    peak, report = run(tmp_path, ATTENTION, ["sdpa=math"])
    assert peak > 2 * MiB + 2 * 16 * MiB
    assert report == ["sdpa=math: scaled_dot_product_attention calls took math x1"]
    _, report = run(tmp_path, MLP, ["sdpa=flash"])
    assert report == ["sdpa=flash: not applied: no scaled_dot_product_attention call on cuda"]
    assert torch.backends.cuda.flash_sdp_enabled()  # the flags are put back


def test_script_own_sdpa_kernel_is_overridden(tmp_path):
    own = ATTENTION.replace(
        "out = F.scaled_dot_product_attention(q, q, q)",
        "from torch.nn.attention import sdpa_kernel, SDPBackend\n"
        "with sdpa_kernel(SDPBackend.MATH):\n"
        "    out = F.scaled_dot_product_attention(q, q, q)",
    )
    peak, report = run(tmp_path, own, ["sdpa=efficient"])
    assert peak == 2 * MiB + 32 * KiB
    assert report == ["sdpa=efficient: scaled_dot_product_attention calls took efficient x1; "
                      "the script's own sdpa_kernel x1 overridden"]  # fmt: skip


def test_knob_specs():
    assert is_code_knob("checkpoint=Block") and is_code_knob(" autocast = bf16")
    assert not is_code_knob("expandable_segments") and not is_code_knob("max_split_size_mb:64")
    assert CodeKnob.parse("autocast=BF16") == CodeKnob("autocast", "bf16")
    assert CodeKnob.parse("fused=True") == CodeKnob("fused", "true")
    for bad in ("autocast=fp8", "sdpa=fast", "foreach=yes", "zero_grad=0", "checkpoint=",
                "checkpoint=(", "remat=Block"):  # fmt: skip
        with pytest.raises(MemlensError):
            CodeKnob.parse(bad)
    with pytest.raises(MemlensError, match="once"), applied(["autocast=bf16", "autocast=fp16"]):
        pass
    original = torch.nn.Module.__call__
    with applied(["checkpoint=Block", "autocast=bf16", "zero_grad=zeros", "foreach=false"]):
        assert torch.nn.Module.__call__ is not original
    assert torch.nn.Module.__call__ is original  # everything is put back

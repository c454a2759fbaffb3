"""Issue 35: `memlens.estimate(...)` and `memlens estimate` against `memlens simulate` of
the plain-PyTorch script they stand for (plain_finetune.py), to the byte on peak active,
on a tiny Llama config (2 layers, hidden 64, vocab 256, 4 heads, 2 KV heads, SwiGLU 128,
tied embeddings); and the breakdown and `.fits` on hand-worked figures.

The tiny Llama's parameters: embedding 256 x 64 = 16,384 (the head is tied to it), per
layer q 64x64 + k 64x32 + v 64x32 + o 64x64 + gate, up, down 3 x 64x128 + two norms of 64
= 36,992, and the final norm 64: 90,432 in 20 tensors, 361,728 bytes in fp32. Its rotary
embedding keeps two buffers of head_dim / 2 = 8 floats (inv_freq and original_inv_freq):
64 bytes. Fused AdamW keeps two fp32 moments per parameter and a float32 step per tensor.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import memlens  # noqa: E402
from memlens.cli.main import run as cli  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.estimate_hf import Build, causal_lm_inputs, load_config  # noqa: E402

SCRIPT = str(Path(__file__).with_name("plain_finetune.py"))
TINY = {
    "model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}  # fmt: skip
PARAMS = 256 * 64 + 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128 + 2 * 64) + 64
TENSORS = 1 + 2 * 9 + 1
ROTARY_BUFFERS = 2 * 8 * 4


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "config.json"
    path.write_text(json.dumps(TINY))
    return path


@pytest.fixture(scope="module")
def simulated(config_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """`memlens simulate plain_finetune.py CONFIG --batch 2 --seq 16`: the whole run."""
    out = tmp_path_factory.mktemp("sim") / "run.pickle"
    run = run_script(SCRIPT, [str(config_file), "--batch", "2", "--seq", "16"], out)
    return memlens.load(run.whole, warn=False).device(0)


@pytest.fixture(scope="module")
def estimated(config_file: Path) -> Any:
    build = Build(load_config(str(config_file), None, {}))
    return memlens.estimate(
        build,
        causal_lm_inputs(2, 16, labels=True),
        (torch.optim.AdamW, {"fused": True}),
        precision="bf16-mixed",
    )


def test_parameter_count_is_the_hand_count(config_file):
    model = Build(load_config(str(config_file), None, {}))()
    assert PARAMS == 90_432
    assert sum(p.numel() for p in model.parameters()) == PARAMS
    assert len(list(model.parameters())) == TENSORS


def test_estimate_equals_simulate_of_the_plain_script(simulated, estimated):
    assert estimated.peak_active_bytes == simulated.peak_active_bytes
    assert estimated.peak_reserved_bytes == simulated.peak_reserved_bytes
    # the same allocations in the same order (the frees after the last step differ: the
    # script's state at exit is what it holds when it returns, the estimate's its own)
    ours = memlens.load(estimated.snapshot, warn=False).device(0)
    assert ours.alloc_size.tolist() == simulated.alloc_size[: ours.n_allocations].tolist()
    assert ours.n_allocations == int((simulated.alloc_event >= 0).sum())


def test_cli_equals_simulate_of_the_plain_script(config_file, simulated, capsys):
    rc = cli(["estimate", str(config_file), "--batch", "2", "--seq-len", "16",
              "--precision", "bf16-mixed", "--optimizer", "adamw-fused", "--json"])  # fmt: skip
    assert rc == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["parameters"] == PARAMS and answer["model_type"] == "llama"
    (row,) = answer["rows"]
    assert row["peak_active_bytes"] == simulated.peak_active_bytes
    assert row["peak_reserved_bytes"] == simulated.peak_reserved_bytes
    assert row["gpu"] == "h100" and row["batch"] == 2 and row["tokens"] == 16


def test_breakdown_at_the_peak(estimated):
    b = estimated.breakdown
    # the rows sum to the peak active bytes; the cache brings them to the reserved there
    assert sum(v for k, v in b.items() if k != "cache") == estimated.peak_active_bytes
    assert b["parameters"] == 4 * PARAMS + ROTARY_BUFFERS
    assert b["optimizer_state"] == 2 * 4 * PARAMS + 4 * TENSORS
    # Hopper's cuBLAS workspace, one for the forward's thread and one for backward's
    assert b["workspaces"] == 2 * 32 * 2**20
    assert estimated.gpu == "h100" and estimated.world == 1 and estimated.wrapped is None


def test_fits_each_way(estimated):
    fit = estimated.fits()  # the simulated H100: 81,559 MiB
    assert fit.fits and fit.capacity == 81559 * 2**20
    assert fit.margin == 81559 * 2**20 - estimated.peak_reserved_bytes
    assert fit.how == "peak reserved fits"
    short = estimated.fits(estimated.peak_active_bytes - 1)
    assert not short and short.how == "peak active exceeds it"
    assert short.margin == estimated.peak_active_bytes - 1 - estimated.peak_reserved_bytes
    assert estimated.fits("rtx4090").capacity == 24564 * 2**20
    with pytest.raises(memlens.MemlensError, match="a card"):
        estimated.fits("potato")


def test_fits_between_the_peaks_simulates_again():
    """Capacity between peak active and peak reserved: the verdict is the run limited to
    it. A model whose 4 MiB weight is freed (the cache keeps its segment) before an
    8 MiB tensor is needed: reserved 12 MiB-ish, active peak 8 MiB + inputs."""
    model = torch.nn.Linear(1024, 1024, bias=False)  # 4 MiB
    est = memlens.estimate(model, torch.zeros(8, 1024), train=False)
    between = (est.peak_active_bytes + est.peak_reserved_bytes) // 2
    if not est.peak_active_bytes < between < est.peak_reserved_bytes:
        pytest.skip("no gap between the peaks in this run")
    fit = est.fits(between)
    assert fit.how in ("completed when limited to it", "OOM when limited to it")


def test_plain_module_and_sgd_by_hand():
    """A bias-free Linear 256 -> 256 (262,144 bytes), batch 8 fp32, SGD without momentum,
    one step: weight, its gradient, no optimizer state; the caller's model stays real."""
    model = torch.nn.Linear(256, 256, bias=False)
    est = memlens.estimate(model, torch.zeros(8, 256), torch.optim.SGD,
                           optimizer_kwargs={"lr": 0.1}, steps=1, gpu="a100")  # fmt: skip
    assert est.breakdown["parameters"] == 256 * 256 * 4
    assert est.breakdown["optimizer_state"] == 0
    assert est.breakdown["workspaces"] in (8_519_680, 2 * 8_519_680)
    assert not isinstance(model.weight, torch._subclasses.fake_tensor.FakeTensor)
    assert model.weight.device.type == "cpu"


def test_bad_arguments_are_one_line():
    lin = torch.nn.Linear(4, 4)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"precision": "fp8"}, "precision 'fp8'"),
        ({"world": 2}, "needs sharding"),
        ({"sharding": "zero3", "world": 2}, "sharding 'zero3'"),
        ({"train": False, "optimizer": torch.optim.SGD}, "optimizer is for training"),
        ({"optimizer": torch.optim.SGD(lin.parameters(), lr=1)}, "optimizer instance"),
        ({"generate": 3}, "for inference"),
    ]
    for kwargs, words in cases:
        with pytest.raises(memlens.MemlensError, match=words):
            memlens.estimate(lin, torch.zeros(1, 4), **kwargs)


def test_cli_bad_input_exit_2(config_file, capsys):
    for argv, words in [
        (["estimate"], "config.json path or --model-type"),
        (["estimate", "/nonexistent/config.json"], "cannot read"),
        (["estimate", str(config_file), "--world", "2"], "needs --sharding"),
        (["estimate", str(config_file), "--optimizer", "lion"], "--optimizer 'lion'"),
        (["estimate", str(config_file), "--generate", "4"], "for --task inference"),
        (["estimate", "--model-type", "nosuchmodel"], "model type 'nosuchmodel'"),
    ]:
        assert cli(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("memlens: error: ") and words in err[0], err


def test_a_card_preset_does_not_limit_the_estimate():
    """A 16 GiB fp32 weight (65,536 x 65,536 x 4 B) on a T4 (15,360 MiB): the estimate's
    run has no limit (a card's preset alone would set its memory as one), so the peak is
    the whole need and the verdict is 'does not fit', not a run cut short by an OOM."""
    est = memlens.estimate(
        lambda: torch.nn.Linear(65536, 65536, bias=False), torch.zeros(1, 65536),
        train=False, gpu="t4",
    )  # fmt: skip
    assert est.oom is None
    assert est.breakdown["parameters"] == 65536 * 65536 * 4
    fit = est.fits()
    assert not fit and fit.how == "peak active exceeds it" and fit.capacity == 15360 * 2**20


def test_lora_trains_only_the_adapters(config_file):
    """peft's LoRA r=4 on its Llama defaults, q_proj and v_proj: per layer A 4x64 and B
    64x4 on q, A 4x64 and B 32x4 on v = 896 parameters in 4 tensors; fused AdamW keeps
    state for those alone (2 fp32 moments and a float32 step each)."""
    pytest.importorskip("peft")
    build = Build(load_config(str(config_file), None, {}), lora=4)
    est = memlens.estimate(build, causal_lm_inputs(2, 16, labels=True),
                           (torch.optim.AdamW, {"fused": True}), precision="bf16-mixed")  # fmt: skip
    lora, tensors = 2 * 896, 2 * 4
    assert est.breakdown["optimizer_state"] == 2 * 4 * lora + 4 * tensors
    assert est.breakdown["parameters"] == 4 * (PARAMS + lora) + ROTARY_BUFFERS


def test_decoding_with_the_kv_cache(config_file):
    """bf16 weights (buffers cast too: 2 x 8 bf16), the forward's one cuBLAS workspace."""
    build = Build(load_config(str(config_file), None, {}))
    est = memlens.estimate(build, causal_lm_inputs(2, 16, labels=False), train=False,
                           generate=8, precision="bf16")  # fmt: skip
    assert est.breakdown["parameters"] == 2 * PARAMS + 2 * 8 * 2
    assert est.breakdown["workspaces"] == 32 * 2**20
    assert est.breakdown["gradients"] == est.breakdown["optimizer_state"] == 0


def test_fsdp2_world_through_the_plan_knob(config_file, capsys):
    rc = cli(["estimate", str(config_file), "--batch", "2", "--seq-len", "16",
              "--world", "4", "--sharding", "fsdp2", "--optimizer", "adamw"])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "fsdp2=4: fully_shard on LlamaDecoderLayer x2, then the root LlamaForCausalLM" in out
    assert "rank 0 of 4" in out and "yes: headroom" in out


def test_config_from_a_model_type_and_sizes(config_file):
    """--model-type llama --hidden-size 64 --layers 2 ...: the same config as the file."""
    sizes = {"hidden_size": 64, "layers": 2, "heads": 4, "kv_heads": 2,
             "intermediate_size": 128, "vocab_size": 256, "tie_embeddings": True}  # fmt: skip
    from_type = load_config(None, "llama", sizes)
    from_file = load_config(str(config_file.parent), None, {"layers": 2})  # a folder works
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "intermediate_size", "vocab_size",
                 "tie_word_embeddings"):  # fmt: skip
        assert getattr(from_type, name) == getattr(from_file, name) == TINY.get(name), name

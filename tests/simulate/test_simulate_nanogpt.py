"""nanoGPT (github.com/karpathy/nanoGPT), a third-party training script with
`torch.compile` on by default, simulated unedited (issue 36).

Opt-in: nanoGPT is not on the package index and its code stays out of this repository.
Point MEMLENS_NANOGPT_DIR at a checkout (scripts/fetch_nanogpt.sh makes one at the commit
these figures were taken on, 3adf61e1); the test copies it and writes its own small data
(random tokens in nanoGPT's uint16 .bin format, the 65-character vocabulary of
shakespeare_char), as its `prepare.py` would without the download. Each run takes 15-25 s
of CPU.

- `train.py config/train_shakespeare_char.py` (6 layers, n_embd 384, block 256, batch
  64, bf16 autocast, dropout 0.2, fused AdamW, one evaluation at step 0): every graph
  compiles (none falls back to eager), and the state it ends with is exact to the byte:
  the fp32 parameters P, AdamW's two moments (2P) and one fp32 step per parameter, the
  batch it prefetched (X, Y), the last step's logits (bf16) and loss, the two cuBLAS
  workspaces (the forward's and autograd's thread's);
- `bench.py` (GPT-2 124M, block 1024, batch 12, 30 steps, its real-data loader on
  generated tokens): the same, with the gradients (its `zero_grad` comes before the
  backward).
"""

from __future__ import annotations

import os
import pickle
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SOURCE = os.environ.get("MEMLENS_NANOGPT_DIR", "")
if not SOURCE:
    pytest.skip(
        "set MEMLENS_NANOGPT_DIR to a nanoGPT checkout (scripts/fetch_nanogpt.sh)",
        allow_module_level=True,
    )

WORKSPACE = 32 * 2**20  # cuBLAS's per thread on the default H100


def _tokens(path: Path, n: int, vocab: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    rng.integers(0, vocab, n, dtype=np.uint16).tofile(path)


@pytest.fixture(scope="module")
def nanogpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("nanogpt") / "nanoGPT"
    shutil.copytree(Path(SOURCE), root, ignore=shutil.ignore_patterns(".git"))
    chars = root / "data" / "shakespeare_char"
    chars.mkdir(parents=True, exist_ok=True)
    alphabet = [chr(i) for i in range(32, 97)]
    meta = {"vocab_size": 65, "itos": dict(enumerate(alphabet)), "stoi": {}}
    meta["stoi"] = {c: i for i, c in enumerate(alphabet)}
    (chars / "meta.pkl").write_bytes(pickle.dumps(meta))
    _tokens(chars / "train.bin", 100_000, 65, 0)
    _tokens(chars / "val.bin", 10_000, 65, 1)
    web = root / "data" / "openwebtext"
    web.mkdir(parents=True, exist_ok=True)
    _tokens(web / "train.bin", 200_000, 50257, 2)
    return root


def _live_by_line(snapshot: dict[str, Any]) -> Counter[str]:
    """The requested bytes of the blocks live at the end, by their innermost nanoGPT frame."""
    out: Counter[str] = Counter()
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["state"] != "active_allocated":
                continue
            frames = [f for f in block.get("frames", []) if "nanoGPT" in f["filename"]]
            key = f"{Path(frames[0]['filename']).name}:{frames[0]['line']}" if frames else "?"
            out[key] += block["requested_size"]
    return out


def test_train_py_compiled_ends_with_exactly_its_parameters_optimizer_and_batch(
    nanogpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(nanogpt)
    args = ["config/train_shakespeare_char.py", "--max_iters=3", "--eval_iters=2"]
    run = run_script("train.py", args, nanogpt / "out.pickle")
    assert not [n for n in run.sim.notes if "ran eagerly" in n]
    # parameters of the config (bias=False, lm_head tied to wte): wte 65 x 384, wpe
    # 256 x 384, per layer two LayerNorm weights, c_attn, attention c_proj, c_fc and
    # the MLP's c_proj; ln_f. 39 tensors.
    d, layers = 384, 6
    per_layer = 2 * d + d * 3 * d + d * d + d * 4 * d + 4 * d * d
    params = 65 * d + 256 * d + layers * per_layer + d
    assert params == 10_745_088
    batch, block = 64, 256
    live = _live_by_line(run.snapshot)
    assert live["train.py:193"] == 4 * params  # model.to(device)
    assert live["train.py:311"] == 2 * 4 * params + 39 * 4  # scaler.step: moments, steps
    assert live["train.py:128"] == 2 * batch * block * 8  # X, Y prefetched (int64)
    assert live["model.py:186"] == batch * block * 65 * 2  # the last logits (bf16)
    assert live["train.py:301"] == 4  # the last loss / gradient_accumulation_steps
    workspaces = live["model.py:170"] + live["train.py:305"]
    assert workspaces == 2 * WORKSPACE  # the compiled forward's first GEMM, backward's
    assert sum(live.values()) == memlens.load(run.snapshot).device(0).end_active_bytes


def test_bench_py_compiled_ends_with_its_parameters_gradients_and_optimizer(
    nanogpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(nanogpt)
    run = run_script("bench.py", [], nanogpt / "bench.pickle")
    assert not [n for n in run.sim.notes if "ran eagerly" in n]
    # GPT-2 124M as bench.py builds it: vocabulary padded to 50,304, block 1024, no
    # biases, lm_head tied; 75 tensors
    d, layers, vocab, block, batch = 768, 12, 50304, 1024, 12
    per_layer = 2 * d + d * 3 * d + d * d + d * 4 * d + 4 * d * d
    params = vocab * d + block * d + layers * per_layer + d
    assert params == 124_373_760
    expected = (
        4 * params  # the parameters
        + 4 * params  # their gradients: zero_grad(set_to_none) runs before backward
        + 2 * 4 * params
        + 75 * 4  # AdamW (fused): two moments, one fp32 step each
        + 2 * batch * block * 8  # X, Y prefetched
        + batch * block * vocab * 2  # the last logits, bf16
        + 4  # the last loss
        + 2 * WORKSPACE
    )
    assert memlens.load(run.snapshot).device(0).end_active_bytes == expected

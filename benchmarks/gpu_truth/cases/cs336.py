"""The cs336 medium Transformer LM (workloads/cs336_medium, the third-party code unedited),
one bf16-autocast training step or one inference_mode forward, recorded with memlens.

    python cs336.py --pattern train --out DIR     # memlens.record -> DIR/step.pickle
    memlens run --output DIR/run.pickle cs336.py --pattern forward   # no --out: the
        # script records nothing itself, `memlens run` records the whole run

The same script runs on a GPU and under `memlens simulate` (memlens.record goes through
torch.cuda's snapshot API, which the simulator provides). Without CUDA (the fake capture
backend of run.sh's MEMLENS_GPU_TRUTH_FAKE=1) it computes on the CPU.
As in the author's `memory_profile`: batch 4, random tokens, the author's AdamW and
cross_entropy; warm-up steps first so the optimizer state exists before the window.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import memlens

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workloads" / "cs336_medium"))

from cs336_basics.model import BasicsTransformerLM  # noqa: E402
from cs336_basics.nn_utils import cross_entropy  # noqa: E402
from cs336_basics.optimizer import AdamW  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--pattern", choices=("train", "forward"), required=True)
    p.add_argument("--out", type=Path, default=None, help="memlens.record into DIR/step.pickle")
    p.add_argument("--context-length", type=int, default=512)
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--d-ff", type=int, default=4096)
    p.add_argument("--num-layers", type=int, default=24)
    p.add_argument("--num-heads", type=int, default=16)
    p.add_argument("--vocab-size", type=int, default=10_000)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--warmup", type=int, default=2)
    return p.parse_args()


def main() -> None:
    a = parse()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = BasicsTransformerLM(
        vocab_size=a.vocab_size,
        context_length=a.context_length,
        d_model=a.d_model,
        num_layers=a.num_layers,
        num_heads=a.num_heads,
        d_ff=a.d_ff,
    ).to(device)
    optimizer = AdamW(model.parameters())
    shape = (a.warmup + 1, a.batch_size, a.context_length)
    inputs = torch.randint(0, a.vocab_size, shape, dtype=torch.long, device=device)
    targets = torch.randint(0, a.vocab_size, shape, dtype=torch.long, device=device)

    def autocast() -> torch.autocast:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    def train_step(i: int) -> None:
        with memlens.stage("forward"), autocast():
            loss = cross_entropy(model(inputs[i]), targets[i])
        with memlens.stage("backward"):
            loss.backward()
        with memlens.stage("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    def forward(i: int) -> None:
        with memlens.stage("forward"), autocast():
            model(inputs[i])

    if a.pattern == "train":
        model.train()
        step, context = train_step, torch.enable_grad
    else:
        model.eval()
        step, context = forward, torch.inference_mode
    with context():
        for i in range(a.warmup):
            memlens.step()
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
        if a.out is None:
            memlens.step()
            step(a.warmup)
        else:
            with memlens.record(a.out / "step.pickle"):
                memlens.step()
                step(a.warmup)
                if device.type == "cuda":
                    torch.cuda.synchronize()
    if device.type == "cuda":
        print(f"peak allocated {torch.cuda.max_memory_allocated()} bytes")


if __name__ == "__main__":
    main()

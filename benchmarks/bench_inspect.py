"""Step-time overhead of the tensor inspector at its default sampling (every=20 steps).

    python benchmarks/bench_inspect.py                 # both models, prints a Markdown table
    python benchmarks/bench_inspect.py --steps 200 --rounds 5 --out docs/benchmarks-inspect.md

For each model, each round runs a block of plain training steps and a block of the same
steps with ``memlens.inspect(model)`` attached (which goes first alternates between rounds) (default settings: every leaf module, outputs,
their gradients, parameters and parameter gradients, every 20th step). The overhead is the
mean step time with the inspector over the mean without, blocks paired round by round, the
median over rounds reported. On a shared machine other processes' bursts swamp means, so
median-based figures are given too: "idle" = (median unsampled step with the inspector −
median plain step) / median plain step; "sampled extra" = median sampled step − median
unsampled step of the same block; "overhead, medians" = idle + sampled extra / (every ×
median plain step). Inspector start-up and close (rendering) are outside the timed
loop; the background process runs during it, on the same machine, as it would for a user.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import memlens  # noqa: E402


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        c = 32
        self.features = nn.Sequential(
            nn.Conv2d(3, c, 3, padding=1),
            nn.BatchNorm2d(c),
            nn.ReLU(inplace=True),
            nn.Conv2d(c, c, 3, padding=1),
            nn.BatchNorm2d(c),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(c, 2 * c, 3, padding=1),
            nn.BatchNorm2d(2 * c),
            nn.ReLU(inplace=True),
            nn.Conv2d(2 * c, 2 * c, 3, padding=1),
            nn.BatchNorm2d(2 * c),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class SmallTransformer(nn.Module):
    def __init__(
        self, vocab: int = 1000, d: int = 128, heads: int = 4, layers: int = 2, seq: int = 64
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens) + self.pos[: tokens.shape[1]]))


def make(name: str):
    torch.manual_seed(0)
    if name == "cnn":
        model = SmallCNN()
        x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    else:
        model = SmallTransformer()
        x = torch.randint(0, 1000, (16, 64))
        y = torch.randint(0, 1000, (16, 64))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return model, step


def timed(step, n: int, ins=None) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        step()
        if ins is not None:
            ins.step()
        times.append(time.perf_counter() - t0)
    return times


def inspected(model, step, steps: int, every: int, out: Path):
    ins = memlens.inspect(model, every=every, out=out, render="none")
    time.sleep(1.0)  # let the background process start (outside the timed loop)
    times = timed(step, steps, ins)
    ins.close()
    return times, ins


def bench(name: str, steps: int, rounds: int, every: int) -> dict:
    model, step = make(name)
    timed(step, 20)  # warm-up
    ratios, base_means, ins_means, base_medians = [], [], [], []
    sampled_costs, robust, idle = [], [], []
    dropped = sent = 0
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            # Alternate which block goes first: the second block of a pair runs measurably
            # slower or faster on a busy machine, whatever it contains.
            if r % 2:
                with_ins, ins = inspected(model, step, steps, every, Path(tmp) / f"{name}{r}")
                base = timed(step, steps)
            else:
                base = timed(step, steps)
                with_ins, ins = inspected(model, step, steps, every, Path(tmp) / f"{name}{r}")
            dropped += ins.samples_dropped
            sent += ins.samples_sent
            b, w = statistics.fmean(base), statistics.fmean(with_ins)
            base_means.append(b)
            base_medians.append(statistics.median(base))
            ins_means.append(w)
            ratios.append(w / b - 1)
            sampled = [t for i, t in enumerate(with_ins) if i % every == 0]
            unsampled = [t for i, t in enumerate(with_ins) if i % every]
            mb, mu = statistics.median(base), statistics.median(unsampled)
            # Robust to other processes' bursts: a sampled step against the unsampled steps
            # of the same block, and the unsampled steps against the plain block.
            sampled_costs.append(statistics.median(sampled) - mu)
            idle.append((mu - mb) / mb)
            robust.append((mu - mb + (statistics.median(sampled) - mu) / every) / mb)
    return {
        "model": name,
        "params": sum(p.numel() for p in model.parameters()),
        "modules": len(_leaf_count(model)),
        "base_ms": 1e3 * statistics.median(base_means),
        "ins_ms": 1e3 * statistics.median(ins_means),
        "overhead": statistics.median(ratios),
        "overhead_all": ratios,
        "robust": statistics.median(robust),
        "idle": statistics.median(idle),
        "plain_median_ms": 1e3 * statistics.median(base_medians),
        "sampled_extra_ms": 1e3 * statistics.median(sampled_costs),
        "sent": sent,
        "dropped": dropped,
    }


def _leaf_count(model) -> list:
    from memlens.inspector.select import select_modules

    return select_modules(model, None)


def table(results: list[dict], steps: int, rounds: int, every: int) -> str:
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"torch {torch.__version__} (CPU, {torch.get_num_threads()} threads). "
        f"{rounds} rounds of {steps} steps with and {steps} without, every={every}.",
        "",
        "| model | parameters | hooked modules | step without (mean / median) | step with (mean) | overhead, means | each round | idle | extra on a sampled step | overhead, medians | samples sent / dropped |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        each = ", ".join(f"{100 * x:+.1f}%" for x in r["overhead_all"])
        lines.append(
            f"| {r['model']} | {r['params']:,} | {r['modules']} | {r['base_ms']:.2f} / {r['plain_median_ms']:.2f} ms "
            f"| {r['ins_ms']:.2f} ms | {100 * r['overhead']:+.1f}% | {each} | {100 * r['idle']:+.1f}% "
            f"| {r['sampled_extra_ms']:.1f} ms | **{100 * r['robust']:+.1f}%** | {r['sent']} / {r['dropped']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--models", nargs="+", default=["cnn", "transformer"], choices=["cnn", "transformer"]
    )
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    args = ap.parse_args()
    results = [bench(m, args.steps, args.rounds, args.every) for m in args.models]
    text = table(results, args.steps, args.rounds, args.every)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()

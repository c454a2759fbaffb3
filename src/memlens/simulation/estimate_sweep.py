"""`memlens estimate`'s table: every configuration (batch x sequence x precision) on
every card, one simulation per configuration and kind of card, and the fits/doesn't-fit
verdict per card (Estimate.fits: exact, simulating again with the card's memory when the
peaks fall on either side of it).

Cards that simulate alike share one run: a card changes the run only through its compute
capability (the cuBLAS workspace, the attention kernels' eligibility) and its
multiprocessor count (flash attention's split heuristic), never through its memory.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from memlens.errors import MemlensError
from memlens.simulation.estimate import Workload, run, workload
from memlens.simulation.estimate_hf import Build, causal_lm_inputs, optimizer
from memlens.simulation.estimate_result import BREAKDOWN_ROWS, Estimate
from memlens.simulation.gpus import gpu_preset


class FitRow(TypedDict):
    fits: bool
    capacity_bytes: int
    needed_bytes: int
    margin_bytes: int
    how: str


class EstimateRow(TypedDict):
    """One configuration on one card."""

    batch: int
    tokens: int  # training / plain inference: --seq-len; decoding: --prompt
    generate: int
    precision: str
    gpu: str
    peak_active_bytes: int
    peak_reserved_bytes: int
    breakdown: dict[str, int]
    fit: FitRow
    wrapped: str | None
    notes: list[str]


class EstimateResult(TypedDict):
    """`memlens estimate --json`: what was simulated, and a row per configuration and card."""

    schema: int
    model_type: str
    parameters: int
    task: str
    optimizer: str | None
    world: int
    sharding: str | None
    rows: list[EstimateRow]


@dataclass(frozen=True)
class Task:
    """What every configuration of the table shares."""

    build: Build
    train: bool
    optimizer: str
    generate: int
    world: int
    sharding: str | None
    steps: int | None = None


def make_task(
    config: str | None,
    model_type: str | None,
    sizes: Mapping[str, Any],
    train: bool,
    optimizer: str,
    gradient_checkpointing: bool,
    lora: int,
    prompt: Sequence[int] | None,
    generate: int,
    steps: int | None,
    world: int,
    sharding: str | None,
) -> Task:
    """The table's shared settings from a host's options (the CLI's, an MCP tool's), each
    checked before any simulation; one error line for a bad combination."""
    from memlens.simulation.estimate_hf import load_config

    if train and (prompt or generate):
        raise MemlensError("--prompt and --generate are for --task inference")
    if generate < 0 or (generate and not prompt) or (prompt and not generate):
        raise MemlensError("decoding takes --prompt N and --generate M (M >= 1) together")
    if lora < 0 or (lora and not train):
        raise MemlensError("--lora R (R >= 1) is for training")
    if world < 1:
        raise MemlensError("--world is a number of GPUs: 1 or more")
    if world > 1 and sharding is None:
        raise MemlensError(f"--world {world} needs --sharding fsdp2 or ddp")
    build = Build(load_config(config, model_type, sizes), gradient_checkpointing, lora)
    return Task(build, train, optimizer, generate, world, sharding, steps)


def sweep(
    task: Task,
    batches: Sequence[int],
    tokens: Sequence[int],
    precisions: Sequence[str],
    gpus: Sequence[str],
    progress: Callable[[str], None] | None = None,
) -> list[EstimateRow]:
    """The table's rows, configuration by configuration, card by card."""
    cards = [gpu_preset(g) for g in gpus]
    # bfloat16 needs compute capability 8.0 (Ampere) or later, as torch.autocast says
    no_bf16 = [c.key for c in cards if c.capability < (8, 0)]
    if no_bf16 and any(p.startswith("bf16") for p in precisions):
        raise MemlensError(
            f"{', '.join(no_bf16)} has no bfloat16 (compute capability below 8.0): use "
            "--precision fp16-mixed or fp16 for it"
        )
    works = [
        (b, t, p, _workload(task, b, t, p)) for b in batches for t in tokens for p in precisions
    ]  # every argument checked before the first simulation
    task.build.check()
    rows: list[EstimateRow] = []
    for b, t, p, work in works:
        done: dict[tuple[Any, ...], Estimate] = {}
        for card in cards:
            alike = (card.capability, card.multiprocessors)
            if alike not in done:
                if progress is not None:
                    progress(f"batch {b}, {t} tokens, {p} on {card.key}")
                done[alike] = run(work, card.key)
            est = done[alike]
            fit = est.fits(card.key)
            rows.append(
                {
                    "batch": b,
                    "tokens": t,
                    "generate": task.generate,
                    "precision": p,
                    "gpu": card.key,
                    "peak_active_bytes": est.peak_active_bytes,
                    "peak_reserved_bytes": est.peak_reserved_bytes,
                    "breakdown": {k: est.breakdown[k] for k in BREAKDOWN_ROWS},
                    "fit": {
                        "fits": fit.fits,
                        "capacity_bytes": fit.capacity,
                        "needed_bytes": fit.needed,
                        "margin_bytes": fit.margin,
                        "how": fit.how,
                    },
                    "wrapped": est.wrapped,
                    "notes": est.notes,
                }
            )
    return rows


def result(task: Task, rows: list[EstimateRow]) -> EstimateResult:
    """The rows with what they share: the model (its parameter count from its config,
    built on the meta device: nothing allocated) and the task."""
    import torch

    with torch.device("meta"):
        model = task.build()
    return {
        "schema": 1,
        "model_type": str(task.build.config.model_type),
        "parameters": sum(p.numel() for p in model.parameters()),
        "task": "train" if task.train else "inference",
        "optimizer": task.optimizer if task.train else None,
        "world": task.world,
        "sharding": task.sharding,
        "rows": rows,
    }


def _workload(task: Task, batch: int, tokens: int, precision: str) -> Workload:
    return workload(
        model=task.build,
        inputs=causal_lm_inputs(batch, tokens, labels=task.train),
        optimizer=optimizer(task.optimizer) if task.train else None,
        optimizer_kwargs=None,
        loss=None,
        train=task.train,
        steps=task.steps,
        precision=precision,
        generate=task.generate,
        world=task.world,
        sharding=task.sharding,
    )

"""A tiny Llama built from a config (no weights, no hub) and an in-memory dataset, for the
trainer callbacks' tests. Everything runs under `memlens.simulate`, so sizes are what a GPU
would allocate and the run takes a second or two."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

SEQ = 16
# Ours, in the order a step holds them; torch adds its own ranges (Optimizer.step#..., the
# DataLoader's), which the tests leave out.
OURS = ("forward", "backward", "optimizer")


def tiny_llama() -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """64 sequences of SEQ token ids, labels = inputs (causal LM)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = (torch.arange(SEQ) + i) % 128
        return {"input_ids": ids, "labels": ids}


def our_stages(intervals: list[Any]) -> list[tuple[str, int, str | None]]:
    """(name, depth, parent's name) of memlens's ranges, in start order."""
    by_index = {s["index"]: s for s in intervals}
    out = []
    for s in intervals:
        if s["base_name"] == "memlens.step" or s["name"] in OURS:
            parent = by_index.get(s["parent"]) if s["parent"] is not None else None
            out.append((s["name"], s["depth"], parent["name"] if parent else None))
    return out


def expected_stages(steps: range) -> list[tuple[str, int, str | None]]:
    out: list[tuple[str, int, str | None]] = []
    for n in steps:
        out.append((f"memlens.step#{n}", 0, None))
        out += [(name, 1, f"memlens.step#{n}") for name in OURS]
    return out

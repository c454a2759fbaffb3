"""Shared recording helper for the GPU ground-truth scripts (each script is a plain user script)."""

import sys

import torch


def start() -> None:
    torch.cuda.memory._record_memory_history(max_entries=200_000)


def dump(default: str) -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else default
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(path)
    print(
        "wrote",
        path,
        "peak",
        torch.cuda.max_memory_allocated(),
        "reserved",
        torch.cuda.max_memory_reserved(),
    )

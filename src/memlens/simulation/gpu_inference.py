"""`--gpu like:SNAPSHOT`: the card a GPU recording implies, for simulating the same run.

A recording does not name its card, but it shows the card's class and size:
- cuBLAS's workspace: 8,519,680 bytes per handle before Hopper, 32 MiB from Hopper on
  (PyTorch's defaults, gpus.py), allocated at the first GEMM of each thread;
- the capacity: at an OOM, PyTorch had reserved what it had and the driver reported the
  rest free, so the card holds at least their sum (plus the CUDA context);
- the allocator's settings the recording lists (PYTORCH_CUDA_ALLOC_CONF).
The preset picked is the smallest of the class that holds the capacity seen, else the
class's usual one; every reason is said, and what could not be inferred too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from memlens.errors import MemlensError
from memlens.simulation.gpus import GPUS, HOPPER_WORKSPACE, OLDER_WORKSPACE, Gpu, gpu_preset
from memlens.snapshot.actions import Action
from memlens.units import format_bytes

PREFIX = "like:"
# The class's preset when no OOM bounds the capacity: the usual training card of each.
USUAL = {True: "h100", False: "a100"}  # Hopper or later -> preset


@dataclass(frozen=True)
class Inferred:
    """The preset to simulate, the allocator settings as a PYTORCH_CUDA_ALLOC_CONF
    string, and why, one reason per line."""

    gpu: str
    alloc_conf: str
    reasons: tuple[str, ...]


def is_like(gpu: str | None) -> bool:
    return gpu is not None and gpu.startswith(PREFIX)


def infer_gpu(spec: str) -> Inferred:
    """`like:PATH`'s card (see the module's docstring)."""
    # here, not at the top: every `memlens simulate` imports this module, and the advice's
    # replays (about 0.2 s of CPU) serve `--gpu like:` alone
    import memlens
    from memlens.analysis.advise_replays import oom_capacity

    path = spec[len(PREFIX) :]
    try:
        dev = memlens.load(path, warn=False).device(0)
    except (OSError, MemlensError) as exc:
        raise MemlensError(f"--gpu {spec}: cannot read the recording ({exc})") from None
    # every allocation the recording knows: the trace's and those older than it (the
    # workspaces are often allocated before history was switched on)
    sizes = np.concatenate([dev.size[dev.action == Action.ALLOC], dev.alloc_size])
    older = bool(np.any(sizes == OLDER_WORKSPACE))
    newer = bool(np.any(sizes == HOPPER_WORKSPACE))
    reasons = []
    if older:
        hopper = False
        reasons.append(f"a cuBLAS workspace of {OLDER_WORKSPACE:,} bytes: a card before Hopper")
    elif newer:
        hopper = True
        reasons.append("a 32 MiB allocation, as Hopper's cuBLAS workspace: Hopper or later")
    else:
        hopper = True
        reasons.append("no cuBLAS workspace seen (no GEMM recorded): the class is the default's")
    capacity = oom_capacity(dev)
    card = _pick(hopper, capacity)
    if capacity is not None:
        reasons.append(
            f"an OOM with {format_bytes(capacity)} reserved or free: the smallest such card "
            f"holding it is {card.name}"
        )
    else:
        reasons.append(
            f"no OOM, so no capacity: {card.name} assumed (peak reserved "
            f"{format_bytes(dev.peak_reserved_bytes)}; --device-memory to say the card's)"
        )
    conf = _conf(dev.snapshot.allocator_settings)
    reasons.append(f"allocator settings recorded: {conf or 'the defaults'}")
    return Inferred(card.key, conf, tuple(reasons))


def _pick(hopper: bool, capacity: int | None) -> Gpu:
    cards = sorted(
        (g for g in GPUS.values() if (g.capability >= (9, 0)) == hopper), key=lambda g: g.memory
    )
    if capacity is None:
        return gpu_preset(USUAL[hopper])
    holding = [g for g in cards if g.memory >= capacity]
    return holding[0] if holding else cards[-1]


def _conf(allocator_settings: dict[str, Any]) -> str:
    from memlens.analysis.allocator_replay import recorded_settings

    s = recorded_settings(allocator_settings)
    parts = []
    if s.expandable_segments:
        parts.append("expandable_segments:True")
    if s.max_split_size is not None:
        parts.append(f"max_split_size_mb:{s.max_split_size >> 20}")
    return ",".join(parts)


def resolve_gpu(gpu: str | None, say: Callable[[str], None]) -> tuple[str | None, str | None]:
    """(the preset to simulate, the allocator settings inferred or None) for a --gpu
    value: `like:PATH` inferred (each reason said), anything else as given."""
    if not is_like(gpu):
        return gpu, None
    assert gpu is not None
    inferred = infer_gpu(gpu)
    for reason in inferred.reasons:
        say(f"--gpu {gpu}: {reason}")
    say(f"--gpu {gpu}: simulating {gpu_preset(inferred.gpu).name}")
    return inferred.gpu, inferred.alloc_conf or None

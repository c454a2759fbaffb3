"""A synthetic fleet with known answers: N rank files of one training loop, each with a
little per-rank noise, and chosen ranks skewed the ways real fleets go wrong.

    write_fleet("fleet/", ranks=64, skews={3: "leak", 17: "activations", 40: "pipeline"})

Every rank runs the same generator (memlens's synthetic training loop, same seed: ranks
of one job run the same code in lockstep) with its batch jittered by up to ±1% (the
noise). The skews (the ground truth for tests and benchmarks):

  leak         one tensor per step is kept forever (a list of losses, say): a new call
               site, end and peak memory grow with the steps;
  activations  this rank's batch is 1.5x: every activation, so forward/backward peaks
               and the activation bytes at the peak, are larger;
  pipeline     this rank holds 1.5x the layers (an imbalanced pipeline stage): more
               parameters, gradients, optimizer state and activations.
"""

from __future__ import annotations

import bisect
import pickle
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError
from memlens.simulation.synthetic import generate_trace_dict

SKEWS = ("leak", "activations", "pipeline")
NOISE = 0.01  # batch jitter, as a fraction
LEAK_SHARE = 0.6  # what the leak adds to the end memory over the whole trace
LEAK_BASE = 0x7E00_0000_0000  # leaked segments live apart from the generator's
LEAK_FRAMES = (
    {"filename": "/home/user/project/train.py", "line": 41, "name": "train_step"},
    {"filename": "/home/user/project/train.py", "line": 55, "name": "<module>"},
)


def rank_options(
    rank: int,
    skew: str | None,
    *,
    events: int,
    layers: int,
    hidden: int,
    batch_tokens: int,
    seed: int,
) -> dict[str, Any]:
    """generate_trace_dict options of one rank: the shared shape, its noise, its skew."""
    jitter = 1 + random.Random(seed * 1_000_003 + rank).uniform(-NOISE, NOISE)
    tokens = max(1, round(batch_tokens * jitter))
    if skew == "activations":
        tokens = round(tokens * 1.5)
    if skew == "pipeline":
        layers = layers + (layers + 1) // 2
    return dict(events=events, layers=layers, hidden=hidden, batch_tokens=tokens, seed=seed)


def rank_snapshot(
    rank: int,
    skew: str | None = None,
    *,
    events: int = 2_000,
    layers: int = 4,
    hidden: int = 128,
    batch_tokens: int = 512,
    seed: int = 0,
) -> dict[str, Any]:
    """The snapshot dict of one rank (PyTorch's format)."""
    if skew is not None and skew not in SKEWS:
        raise MemlensError(f"unknown skew {skew!r} (one of: {', '.join(SKEWS)})")
    opts = rank_options(
        rank,
        skew,
        events=events,
        layers=layers,
        hidden=hidden,
        batch_tokens=batch_tokens,
        seed=seed,
    )
    snap = generate_trace_dict(**opts)
    if skew == "leak":
        add_leak(snap)
    return snap


def add_leak(snap: dict[str, Any]) -> None:
    """One allocation per step (at each ProfilerStep END) that is never freed, each in a
    segment of its own, with the final `segments` listing them: the file stays one that
    memlens replays exactly."""
    trace = snap["device_traces"][0]
    ends = sorted(
        a["time_us"]
        for a in snap["external_annotations"]
        if a["name"].startswith("ProfilerStep#") and a["stage"] == "END"
    )
    if not ends or not trace:
        return
    end_bytes = sum(
        b["size"]
        for s in snap["segments"]
        for b in s["blocks"]
        if s["device"] == 0 and b["state"] == "active_allocated"
    )
    size = max(512, -(-int(end_bytes * LEAK_SHARE / len(ends)) // 512) * 512)
    frames = list(LEAK_FRAMES)
    stream = trace[0]["stream"]
    times = [e["time_us"] for e in trace]
    out: list[dict[str, Any]] = []
    prev = 0
    for k, t in enumerate(ends):
        at = bisect.bisect_right(times, t)
        out.extend(trace[prev:at])
        prev = at
        addr = LEAK_BASE + k * (size + (2 << 20))
        for action in ("segment_alloc", "alloc"):
            out.append(
                {
                    "action": action,
                    "addr": addr,
                    "size": size,
                    "stream": stream,
                    "time_us": t,
                    "frames": frames,
                    "compile_context": "N/A",
                    "user_metadata": "",
                }
            )
        block = {
            "address": addr,
            "size": size,
            "requested_size": size,
            "state": "active_allocated",
            "frames": frames,
        }
        snap["segments"].append(
            {
                "device": 0,
                "address": addr,
                "total_size": size,
                "allocated_size": size,
                "active_size": size,
                "requested_size": size,
                "stream": stream,
                "segment_type": "large",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": frames,
                "blocks": [block],
            }
        )
    out.extend(trace[prev:])
    snap["device_traces"][0] = out
    snap["segments"].sort(key=lambda s: (s["device"], s["address"]))


def parse_skews(specs: Mapping[int, str] | list[str] | tuple[str, ...]) -> dict[int, str]:
    """{rank: skew} from a mapping or from "KIND:RANK" strings (`--skew leak:3`)."""
    if isinstance(specs, Mapping):
        out = dict(specs)
    else:
        out = {}
        for spec in specs:
            kind, _, number = spec.partition(":")
            if not number.strip().isdigit():
                raise MemlensError(f"--skew {spec!r}: expected KIND:RANK, e.g. leak:3")
            out[int(number)] = kind.strip()
    for rank, skew in out.items():
        if skew not in SKEWS:
            raise MemlensError(f"skew {skew!r} of rank {rank}: one of {', '.join(SKEWS)}")
    return out


def write_fleet(
    out_dir: str | Path,
    ranks: int,
    skews: Mapping[int, str] | list[str] | tuple[str, ...] = (),
    **options: Any,
) -> list[Path]:
    """Write `ranks` files out_dir/rank{i:05d}.pickle (options: see rank_snapshot) and
    return their paths. `skews`: {rank: "leak"|"activations"|"pipeline"}."""
    planted = parse_skews(skews)
    bad = [r for r in planted if not 0 <= r < ranks]
    if bad:
        raise MemlensError(f"skewed rank {bad[0]} is outside 0..{ranks - 1}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    width = max(5, len(str(ranks - 1)))
    paths = []
    for r in range(ranks):
        p = out / f"rank{r:0{width}d}.pickle"
        with open(p, "wb") as fh:
            pickle.dump(rank_snapshot(r, planted.get(r), **options), fh, protocol=4)
        paths.append(p)
    return paths

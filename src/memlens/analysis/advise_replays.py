"""The allocator replays `memlens advise` ranks its exact findings on: the trace's own
requests through the model of PyTorch's caching allocator (analysis/allocator_model.py),
once with the recorded settings and once per what-if, joined with the trace-only findings
of analysis/advise.py. Torch-free: the CLI, the MCP tool and the Python API all run it; a
`--script` check of the findings is planning/advise.py's (it simulates, so it needs torch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from memlens.analysis.advise import advise as advise_findings
from memlens.analysis.allocator_replay import Replay, recorded_settings, replay, what_if
from memlens.analysis.results import AdviceReplay, AdviseResult
from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace
from memlens.units import parse_bytes

# What-ifs replayed when none is asked for: the settings that answer fragmentation.
WHAT_IFS = ("expandable_segments:True", "max_split_size_mb:256")


def oom_capacity(dev: DeviceTrace) -> int | None:
    """Bytes PyTorch could have reserved at the trace's first OOM: reserved just before it
    plus what the driver reported free (None without an OOM)."""
    ooms = np.flatnonzero(dev.action == Action.OOM)
    if not len(ooms):
        return None
    e = int(ooms[0])
    return dev.reserved_at(e - 1) + int(dev.addr[e])


def replays(dev: DeviceTrace, what_ifs: Sequence[str]) -> list[AdviceReplay]:
    """The recorded settings' replay first, then each what-if's."""
    recorded = replay(dev)
    capacity = oom_capacity(dev)
    base = recorded_settings(dev.snapshot.allocator_settings)
    out: list[AdviceReplay] = [_row(dev, recorded, True, None)]
    for conf in what_ifs:
        r = replay(dev, what_if(base, conf), conf, capacity)
        out.append(_row(dev, r, False, None if capacity is None else r.failed == 0))
    return out


def _row(dev: DeviceTrace, r: Replay, recorded: bool, fits: bool | None) -> AdviceReplay:
    return {
        "settings": r.settings,
        "recorded": recorded,
        "peak_reserved_bytes": r.peak_reserved,
        "saving_bytes": dev.peak_reserved_bytes - r.peak_reserved,
        "mismatched_events": r.mismatches if recorded else 0,
        "oom_fits": fits,
    }


@dataclass(frozen=True)
class AdviseOptions:
    """`memlens advise`'s options for its findings and replays (its `--script` check's are
    planning/advise.py's): call sites per finding, the GPUs to shard over, the allocator
    settings replayed (default WHAT_IFS), the GPU's memory ("80GiB" or bytes), the frames
    hidden, and the program's source folder (looked for there, then the current folder)."""

    top: int = 5
    ranks: int | None = None
    what_if: Sequence[str] | None = None
    device_memory: str | int | None = None
    hide_patterns: Sequence[str] | None = None
    source_root: str | None = None


def advise_replayed(
    dev: DeviceTrace, options: AdviseOptions = AdviseOptions()
) -> tuple[AdviseResult, list[AdviceReplay]]:
    """analysis.advise.advise with the allocator replays of `dev` (the recorded settings,
    then each of `options.what_if`); also the replays, which a check reuses."""
    o = options
    runs = replays(dev, tuple(o.what_if or WHAT_IFS))
    total = None if o.device_memory is None else parse_bytes(o.device_memory)
    roots = [r for r in (o.source_root, os.getcwd()) if r]
    result = advise_findings(dev, replays=runs, top=o.top, ranks=o.ranks, device_memory=total,
                             hide_patterns=o.hide_patterns, source_roots=roots)  # fmt: skip
    return result, runs

"""`memlens advise`: the registered analysis's function, here because it joins two layers.

The findings are analysis.advise (trace only); the allocator replays come from the side
package simulation.replay, which the analysis layer may not import. This function runs
the replays and hands them in (docs/architecture.md, "memlens advise").
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memlens.analysis.advise import advise as advise_findings
from memlens.analysis.results import AdviceReplay, AdviseResult
from memlens.errors import MemlensError
from memlens.simulation.allocator import AllocatorSettings
from memlens.simulation.replay import Replay, recorded_settings, replay, what_if
from memlens.snapshot.actions import Action
from memlens.snapshot.model import DeviceTrace
from memlens.units import parse_bytes

# What-ifs replayed when none is asked for: the settings that answer fragmentation.
WHAT_IFS = ("expandable_segments:True", "max_split_size_mb:256")


def check(options: Mapping[str, Any]) -> None:
    """Fail before the load on a setting the model does not know."""
    for conf in options.get("what_if") or ():
        what_if(AllocatorSettings(), conf)
    if options.get("ranks") is not None and options["ranks"] < 1:
        raise MemlensError("--ranks must be at least 1")
    if options.get("device_memory") is not None:
        parse_bytes(options["device_memory"])
    if options.get("script") is not None:
        from memlens.planning.verify import split_script
        from memlens.simulation.gpus import gpu_preset

        path, _ = split_script(options["script"])
        if not os.path.isfile(path):
            raise MemlensError(f"--script: no such script: {path}")
        gpu_preset(options.get("gpu"))
    elif options.get("gpu") is not None:
        raise MemlensError("--gpu is the card of the --script simulation: give --script too")


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


def advise(
    dev: DeviceTrace,
    *,
    top: int = 5,
    ranks: int = 8,
    what_if: Sequence[str] | None = None,
    device_memory: str | int | None = None,
    hide_patterns: Sequence[str] | None = None,
    script: str | None = None,
    gpu: str | None = None,
) -> AdviseResult:
    """`memlens advise`: analysis.advise.advise with the allocator replays of `dev`; with
    `script` ('SCRIPT ARGS'), each finding a knob answers simulated (planning.verify)."""
    runs = replays(dev, tuple(what_if or WHAT_IFS))
    total = None if device_memory is None else parse_bytes(device_memory)
    result = advise_findings(dev, replays=runs, top=top, ranks=ranks, device_memory=total,
                             hide_patterns=hide_patterns)  # fmt: skip
    if script is not None:
        from memlens.cli.options import status
        from memlens.planning.verify import verify

        result["checks"] = verify(
            result, runs, script, gpu, jobs=os.cpu_count() or 1,
            progress=lambda line: status(f"memlens: advise: {line}", err=True), ranks=ranks,
        )  # fmt: skip
    return result

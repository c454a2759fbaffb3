"""`memlens advise`, the registered analysis's function: the torch-free findings and
allocator replays (analysis/advise_replays.py) and, with `script` ('SCRIPT ARGS'), each finding
that a what-if knob answers simulated (planning/verify.py). It lives in planning/ because the
check simulates; the analysis layer reaches it only through the declaration's string.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from memlens.analysis.advise_replays import AdviseOptions, advise_replayed
from memlens.analysis.allocator_model import AllocatorSettings
from memlens.analysis.allocator_replay import what_if as replay_what_if
from memlens.analysis.results import AdviseResult
from memlens.errors import MemlensError
from memlens.snapshot.model import DeviceTrace
from memlens.units import parse_bytes


def check(options: Mapping[str, Any]) -> None:
    """Fail before the load on a setting the model does not know."""
    for conf in options.get("what_if") or ():
        replay_what_if(AllocatorSettings(), conf)
    if options.get("ranks") is not None and options["ranks"] < 2:
        raise MemlensError("--ranks is the number of GPUs to shard over: at least 2")
    root = options.get("source_root")
    if root is not None and not os.path.isdir(root):
        raise MemlensError(f"--source-root: no such folder: {root}")
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


def _stderr(line: str) -> None:
    print(f"memlens: advise: {line}", file=sys.stderr, flush=True)


def advise(
    dev: DeviceTrace,
    *,
    top: int = 5,
    ranks: int | None = None,
    what_if: Sequence[str] | None = None,
    device_memory: str | int | None = None,
    hide_patterns: Sequence[str] | None = None,
    source_root: str | None = None,
    script: str | None = None,
    gpu: str | None = None,
    progress: Callable[[str], None] = _stderr,
) -> AdviseResult:
    """`memlens advise`: the findings with the allocator replays of `dev`; with `script`
    ('SCRIPT ARGS'), each finding a knob answers simulated, each step handed to `progress`
    (a host's own progress display; by default a line on stderr)."""
    options = AdviseOptions(top=top, ranks=ranks, what_if=what_if, device_memory=device_memory,
                            hide_patterns=hide_patterns, source_root=source_root)  # fmt: skip
    result, runs = advise_replayed(dev, options)
    if script is not None:
        from memlens.planning.verify import verify

        result["checks"] = verify(
            result, runs, script, gpu, jobs=os.cpu_count() or 1, progress=progress
        )
    return result

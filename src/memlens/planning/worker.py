"""One point's simulation, in the process that runs it (a local pool worker, or the fresh
interpreter a Dask task starts: planning.cluster): the figures plan keeps of it."""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

from memlens.errors import MemlensError
from memlens.planning.request import PointRequest
from memlens.planning.sites import PeakSite, peak_sites


class PointFigures(TypedDict):
    """What one simulation gave: the whole run's peaks, whether the script ran out of the
    simulated memory, or why it failed (`error`, figures then 0)."""

    peak_active_bytes: int
    peak_reserved_bytes: int
    oom: bool
    error: str | None
    applied: list[str]  # what each code knob covered, or that it did not apply (knobs.py)
    sites: list[PeakSite]  # bytes live at the peak per call site, for the knob table
    # the allocator requests in order (simulation/request_log.py's RequestLog as JSON),
    # when the request asked for them (--interpolate), else None
    requests: list[list[int]] | None


def simulate_point(request: PointRequest) -> PointFigures:
    """One simulation (in a pool worker): the whole run's peaks and the bytes per call
    site at the peak (with `request.sites`), with the request's code knobs
    (simulation.knobs) patched in around the script. The snapshot goes to a temporary
    file: plan keeps only the figures."""
    import memlens
    from memlens.simulation.api import run_target
    from memlens.simulation.knobs.code import applied

    # call sites cost the stacks' collection: only the knob table needs them
    config = replace(request.config, stacks="python" if request.sites else None)
    # the process is this point's alone (a pool worker, or a fresh interpreter on Dask)
    os.environ.update(request.env)
    with (
        tempfile.TemporaryDirectory(prefix="memlens-plan-") as tmp,
        applied(request.knobs) as patched,
    ):
        try:
            run = run_target(request.target, Path(tmp) / "point.pickle", config)
        except MemlensError as exc:  # ScriptFailed included: the point's row says why
            return failed(str(exc), patched.report(None))
    dev = memlens.load(run.whole, warn=False).device(0)
    return {
        "peak_active_bytes": int(dev.peak_active_bytes),
        "peak_reserved_bytes": int(dev.peak_reserved_bytes),
        "oom": run.oom is not None,
        "error": None,
        "applied": patched.report(run.sim.sdpa_backends),
        "sites": peak_sites(dev) if request.sites else [],
        "requests": run.sim.allocator.request_log().to_json() if request.requests else None,
    }


def failed(error: str, applied: list[str] | None = None) -> PointFigures:
    """The figures of a point that did not run to its end for another reason than an OOM."""
    return {
        "peak_active_bytes": 0,
        "peak_reserved_bytes": 0,
        "oom": False,
        "error": error,
        "applied": applied or [],
        "sites": [],
        "requests": None,
    }

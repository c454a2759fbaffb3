"""`memlens plan --scheduler`: a point on a Dask worker (execution/executors.py's DaskExecutor,
as `memlens fleet --scheduler` runs its ranks).

A Dask worker is a long-lived process that runs many tasks, and a script's imports, module
state and patches of torch must not leak from one point into the next: each task runs its
point in a fresh interpreter (`python -m memlens.planning.cluster`), as the local pool
gives each point a fresh process. The task carries the client's working directory, used
when the worker sees it (the script's relative paths then mean what they mean here); the
script's path is absolute. The parent keeps the cache: workers only simulate.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from memlens.execution.isolated import run_isolated, serve
from memlens.planning.request import PointRequest
from memlens.planning.worker import PointFigures, failed, simulate_point

# the request as JSON data, and the client's working directory
Task = tuple[dict[str, Any], str]


def task(request: PointRequest) -> Task:
    """What a worker needs, the script's path absolute (a worker's cwd is not ours)."""
    return replace(request, target=request.target.absolute()).to_json(), os.getcwd()


def simulate_isolated(t: Task) -> PointFigures:
    """On the worker: the point in its own interpreter; its prints are dropped (the local
    pool sends them to the plan's stderr; a worker's has no reader)."""
    request, cwd = t
    done = run_isolated(
        "memlens.planning.cluster",
        request,
        cwd=cwd if os.path.isdir(cwd) else None,
        quiet=True,
    )
    if done.error is not None:
        return failed(f"the point's process {done.error}")
    figures: PointFigures = done.answer
    return figures


def _simulate_request(request: dict[str, Any]) -> PointFigures:
    return simulate_point(PointRequest.from_json(request))


if __name__ == "__main__":
    serve(_simulate_request)

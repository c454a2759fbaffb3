"""`memlens plan --scheduler`: a point on a Dask worker (fleet/executors.py's DaskExecutor,
as `memlens fleet --scheduler` runs its ranks).

A Dask worker is a long-lived process that runs many tasks, and a script's imports, module
state and patches of torch must not leak from one point into the next: each task runs its
point in a fresh interpreter (`python -m memlens.planning.cluster`), as the local pool
gives each point a fresh process. The task carries the client's working directory, used
when the worker sees it (the script's relative paths then mean what they mean here); the
script's path is absolute. The parent keeps the cache: workers only simulate.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from memlens.planning.worker import PointFigures, failed, simulate_point

Task = tuple[str, list[str], dict[str, Any], str]
# The end of a dead point process's stderr kept in its row (its traceback's last lines).
STDERR_TAIL = 400


def task(script: str, argv: list[str], options: dict[str, Any]) -> Task:
    """What a worker needs, every path absolute (a worker's cwd is not ours)."""
    return os.path.abspath(script), list(argv), options, os.getcwd()


def simulate_isolated(t: Task) -> PointFigures:
    """On the worker: the point in its own interpreter; its prints are dropped (the local
    pool sends them to the plan's stderr; a worker's has no reader)."""
    script, argv, options, cwd = t
    with tempfile.TemporaryDirectory(prefix="memlens-plan-") as tmp:
        request, answer = Path(tmp) / "point.json", Path(tmp) / "figures.json"
        request.write_text(json.dumps([script, argv, options]))
        done = subprocess.run(
            [sys.executable, "-m", "memlens.planning.cluster", str(request), str(answer)],
            cwd=cwd if os.path.isdir(cwd) else None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode != 0 or not answer.is_file():
            tail = " ".join(done.stderr[-STDERR_TAIL:].split())
            return failed(f"the point's process exited with {done.returncode}: {tail}")
        figures: PointFigures = json.loads(answer.read_text())
        return figures


def main(request: str, answer: str) -> None:
    script, argv, options = json.loads(Path(request).read_text())
    Path(answer).write_text(json.dumps(simulate_point(script, argv, options)))


if __name__ == "__main__":
    main(*sys.argv[1:3])

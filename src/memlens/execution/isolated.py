"""One task in a fresh interpreter started from a worker (a pool process or a Dask worker),
for work that leaves state behind in its process: a simulation patches torch, starts a
process group and imports the user's script. `memlens simulate --nproc-per-node` runs each
rank this way (simulation/distributed/launch.py) and `memlens plan --scheduler` each point
(planning/cluster.py).

The task and its answer go as JSON through a private temporary directory: plain data,
nothing in either file can run. The child is `python -m MODULE REQUEST ANSWER`, whose
`__main__` calls `serve`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The end of a dead child's stderr kept in the error (its traceback's last lines).
STDERR_TAIL = 400


@dataclass(frozen=True)
class Isolated:
    """The child's answer (None when it died: `error` says how) and what it wrote to
    stderr (captured, for the caller to pass on or drop)."""

    answer: Any
    error: str | None
    stderr: str


def run_isolated(
    module: str, request: Any, *, cwd: str | None = None, quiet: bool = False
) -> Isolated:
    """Run `module`'s `serve` on `request` in a new interpreter (in `cwd`, if given; its
    stdout is ours, or dropped when `quiet`)."""
    with tempfile.TemporaryDirectory(prefix="memlens-task-") as tmp:
        ask, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        ask.write_text(json.dumps(request))
        done = subprocess.run(
            [sys.executable, "-m", module, str(ask), str(answer)],
            cwd=cwd,
            stdout=subprocess.DEVNULL if quiet else None,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode != 0 or not answer.is_file():
            tail = " ".join(done.stderr[-STDERR_TAIL:].split())
            return Isolated(None, f"exited with {done.returncode}: {tail}", done.stderr)
        return Isolated(json.loads(answer.read_text()), None, done.stderr)


def serve(handle: Callable[[Any], Any]) -> None:
    """The child's side: `handle` the request in argv[1], its answer to argv[2]."""
    request, answer = sys.argv[1:3]
    Path(answer).write_text(json.dumps(handle(json.loads(Path(request).read_text()))))

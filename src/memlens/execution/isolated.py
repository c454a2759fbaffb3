"""One task in a fresh interpreter started from a worker (a pool process or a Dask worker),
for work that leaves state behind in its process: a simulation patches torch, starts a
process group and imports the user's script. `memlens simulate --nproc-per-node` runs each
rank this way (simulation/distributed/launch.py) and `memlens plan --scheduler` each point
(planning/cluster.py).

The task and its answer go as JSON through a private temporary directory: plain data,
nothing in either file can run. The child runs MODULE as `__main__` (REQUEST ANSWER its
arguments), which calls `serve`.

The child starts isolated (`python -I`): neither the current folder nor the user's site
folder is on its sys.path, so a `json.py` where the command was started cannot stand in
for a module memlens or torch imports (`python -m` would put that folder first). memlens
is imported from where this process found it (its folder is passed explicitly), and the
folders of PYTHONPATH, which -I ignores, are kept: a user's own packages stay importable.
The simulated script itself still gets its own folder first on sys.path, as
`python script.py` gives it (simulation/api.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import memlens

# the folder memlens was imported from, handed to every fresh interpreter
MEMLENS_HOME = str(Path(memlens.__file__).resolve().parents[1])

# argv: HOME PYTHONPATH MODULE ARGS...; the module runs as __main__ with argv [MODULE, ARGS]
_BOOT = (
    "import os, runpy, sys; "
    "home, extra, module = sys.argv[1:4]; "
    "sys.path[:0] = [home, *[p for p in extra.split(os.pathsep) if p]]; "
    "sys.argv = [module, *sys.argv[4:]]; "
    "runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def isolated_command(module: str, *args: str) -> list[str]:
    """The command line of a fresh, isolated interpreter running `module` as `__main__`."""
    extra = os.environ.get("PYTHONPATH", "")
    return [sys.executable, "-I", "-c", _BOOT, MEMLENS_HOME, extra, module, *args]


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
            isolated_command(module, str(ask), str(answer)),
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


# The environment of an isolated forkserver: no current folder on sys.path (3.11+), no user
# site, memlens's folder first; forkserver_env.py puts the caller's values back in the
# server (its preload), so the simulated scripts see the environment they were given.
_ISOLATING = {"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1"}
RESTORE = "MEMLENS_FORKSERVER_RESTORE"
_environ_lock = threading.Lock()


def isolated_forkserver(preload: list[str]) -> BaseContext:
    """multiprocessing's forkserver context with its server started isolated and `preload`
    imported there once (each process it forks then has them). `python -c`, how
    multiprocessing starts the server, would put the current folder first on sys.path
    while the preload (torch) imports json and the rest; started here, it does not."""
    from multiprocessing import forkserver, get_context

    context = get_context("forkserver")
    context.set_forkserver_preload(["memlens.execution.forkserver_env", *preload])
    with _environ_lock:  # the server inherits os.environ as it is while it starts
        saved = {k: os.environ.get(k) for k in (*_ISOLATING, "PYTHONPATH")}
        path = os.pathsep.join(p for p in (MEMLENS_HOME, saved["PYTHONPATH"]) if p)
        os.environ.update({**_ISOLATING, "PYTHONPATH": path, RESTORE: json.dumps(saved)})
        try:
            forkserver.ensure_running()  # started now, or already running (started here)
        finally:
            restore_environ(saved)
            os.environ.pop(RESTORE, None)
    return context


def restore_environ(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

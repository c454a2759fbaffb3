"""A real Dask cluster on loopback for the tests that run work on one (`memlens fleet
--scheduler`, `memlens plan --scheduler`): a `dask scheduler` and two `dask worker`
processes started here. Import the fixture into the test module."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from typing import Any

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dask_processes():
    """tcp://127.0.0.1:PORT of a scheduler with two single-threaded workers (no nanny:
    killing a worker's process kills the worker, nothing restarts it). Skips where Dask's
    `distributed` is not installed (an opt-in torch matrix venv), before starting anything."""
    pytest.importorskip("distributed")
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask"]
    quiet: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], **quiet)]  # fmt: skip
    # the workers run in another directory than the client, as on another machine: a
    # relative path sent as typed would name nothing there
    procs += [subprocess.Popen([*dask, "worker", address, "--nthreads", "1", "--no-nanny",
                                "--no-dashboard", "--host", "127.0.0.1",
                                "--death-timeout", "60"], cwd="/", **quiet)
              for _ in range(2)]  # fmt: skip
    try:
        from distributed import Client

        deadline = time.monotonic() + 60
        while True:
            try:
                with Client(address, timeout="5s") as c:
                    c.wait_for_workers(2, timeout=60)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        yield address
    finally:
        for p in reversed(procs):  # workers first: a scheduler left alone exits at once
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

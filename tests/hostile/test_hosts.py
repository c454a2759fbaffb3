"""Issue 27 item 3 in the real hosts: the memory bound holds where `RLIMIT_AS` cannot (other
threads run), so each attack ends as its one-line limit error and the host lives on.

`memlens.load` in a Dask worker (a LocalCluster on loopback, worker processes with a
memory limit: the nanny would kill a worker past it) and in a Jupyter kernel (nbclient,
ipykernel, under an address-space limit of its own so that a broken bound fails the test,
not the machine); `memlens fleet` on a directory with a gzip bomb for one rank. The default
run takes two attacks a host; MEMLENS_HOSTILE_FULL=1 takes every attack of
corpus.host_attacks() in both.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from corpus import HOST_LIMITS, _dump, base_snapshot, gzip_bomb, host_attacks

import memlens
from memlens.snapshot.limits import LimitExceeded

FULL = os.environ.get("MEMLENS_HOSTILE_FULL") == "1"


def _cases(default: tuple[str, ...]) -> dict[str, bytes]:
    return {name: data for name, data in host_attacks() if FULL or name in default}


def _limit(name: str) -> str:
    return next(limit for prefix, limit in HOST_LIMITS.items() if name.startswith(prefix))


def _written(folder: Path, cases: dict[str, bytes]) -> list[Path]:
    for name, data in cases.items():
        (folder / name).write_bytes(data)
    return [folder / name for name in cases]


def _assert_one_line(path: Path, kind: str, message: str) -> None:
    """The error `memlens.load` raises for the attack: the limit it must stop at, one line."""
    assert kind == "LimitExceeded", (path.name, kind, message)
    assert "\n" not in message, message
    assert message.startswith(f"{path}: stopped: more than "), message
    assert f"the '{_limit(path.name)}' limit" in message, message


def test_the_attacks_stop_in_a_dask_worker(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    paths = _written(tmp_path, _cases(("memo-index-2^28.pickle", "gzip-inflates-3GiB.pickle.gz")))
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
            dashboard_address=None, memory_limit="2GiB", silence_logs=logging.ERROR,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):  # fmt: skip
        pids = client.run(os.getpid)
        for path in paths:
            future = client.submit(memlens.load, str(path), cache=False, warn=False, pure=False)
            with pytest.raises(LimitExceeded) as err:
                future.result(timeout=120)
            _assert_one_line(path, type(err.value).__name__, str(err.value))
        assert client.run(os.getpid) == pids  # the same worker process: not killed, not restarted
        assert client.submit(sum, [1, 2], pure=False).result(timeout=30) == 3


KERNEL_CELLS = (
    # an address-space limit: a bound that does not hold fails as a MemoryError here
    "import json, os, resource, memlens\n"
    "resource.setrlimit(resource.RLIMIT_AS, (6 << 30, resource.RLIM_INFINITY))\n"
    "print(os.getpid())",
    "try:\n"
    "    memlens.load({path!r}, cache=False, warn=False)\n"
    "    print(json.dumps(['loaded', '']))\n"
    "except BaseException as exc:\n"
    "    print(json.dumps([type(exc).__name__, str(exc)]))",
    "print(os.getpid())",
)


def test_the_attacks_stop_in_a_jupyter_kernel(tmp_path: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    paths = _written(tmp_path, _cases(("memo-index-2^28.pickle", "empty-dicts-14M.pickle")))
    nb = nbformat.v4.new_notebook()
    sources = [KERNEL_CELLS[0]] + [KERNEL_CELLS[1].format(path=str(p)) for p in paths]
    nb.cells = [nbformat.v4.new_code_cell(s) for s in [*sources, KERNEL_CELLS[2]]]
    client = nbclient.NotebookClient(
        nb, timeout=120, kernel_name="python3", allow_errors=False,
        resources={"metadata": {"path": str(tmp_path)}},
    )  # fmt: skip
    client.execute()

    def stdout(i: int) -> str:
        return "".join(o.get("text", "") for o in nb.cells[i].outputs if o.get("name") == "stdout")

    for i, path in enumerate(paths, start=1):
        kind, message = json.loads(stdout(i))
        _assert_one_line(path, kind, message)
    assert stdout(0) == stdout(len(paths) + 1)  # the same kernel answered the last cell


@pytest.mark.parametrize("scheduler", ["local", "dask-local"] if FULL else ["local"])
def test_fleet_reports_a_gzip_bomb_rank_as_failed(tmp_path: Path, scheduler: str) -> None:
    (tmp_path / "rank0.pickle").write_bytes(_dump(base_snapshot()))
    bomb = tmp_path / "rank1.pickle.gz"
    bomb.write_bytes(gzip_bomb())
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "fleet", "--no-cache", "--scheduler", scheduler,
         str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "2 ranks (1 ok, 1 failed)" in done.stdout.splitlines()[0], done.stdout
    line = f"  rank 1  {bomb}: stopped: more than 268,435,456 decompressed bytes (inside the gzip"
    assert any(row.startswith(line) for row in done.stdout.splitlines()), done.stdout

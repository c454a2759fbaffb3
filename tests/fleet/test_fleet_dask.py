"""The same fleet on real Dask clusters on loopback: a LocalCluster (2 worker processes),
and a `dask scheduler` + two `dask worker` processes started here, one of which is
SIGKILLed mid-run."""

from __future__ import annotations

import pytest
from fleet_data import PLANTED, RANKS, KillFirstWorker

from dask_cluster import free_port
from memlens.fleet.api import run
from memlens.fleet.results import FleetResult

pytest.importorskip("distributed")


def _figures(result: FleetResult) -> list[dict[str, object]]:
    """Each row without the worker that read it (the only field that may differ)."""
    return [{k: v for k, v in row.items() if k != "worker"} for row in result["table"]]


@pytest.fixture(scope="module")
def local_result(fleet_dir):
    return run(str(fleet_dir), workers=2, diffs=0)


def test_local_cluster_finds_the_same(fleet_dir, local_result):
    r = run(str(fleet_dir), scheduler="dask-local", workers=2, diffs=1)
    assert r["executor"] == "Dask LocalCluster (2 workers)"
    assert sorted(o["rank"] for o in r["outliers"]) == sorted(PLANTED)
    assert _figures(r) == _figures(local_result)
    assert len({row["worker"] for row in r["table"]}) == 2  # both workers took part
    diff = r["outliers"][0]["diff"]
    assert diff is not None and diff["sites"]  # the diff ran on the cluster too


def test_scheduler_and_workers_as_processes_with_one_killed(fleet_dir, dask_processes,
                                                            local_result):  # fmt: skip
    kill_one = KillFirstWorker()
    r = run(str(fleet_dir), scheduler=dask_processes, on_record=kill_one, diffs=0)
    assert r["executor"] == f"Dask cluster at {dask_processes}"
    assert kill_one.killed
    assert sorted(kill_one.seen) == list(range(RANKS))  # every rank exactly once
    assert r["ranks_failed"] == 0
    assert sorted(o["rank"] for o in r["outliers"]) == sorted(PLANTED)
    assert _figures(r) == _figures(local_result)


def test_an_unreachable_scheduler_is_a_one_line_error(fleet_dir, monkeypatch):
    from memlens.errors import MemlensError
    from memlens.execution.executors import DaskExecutor

    monkeypatch.setattr(DaskExecutor, "CONNECT_TIMEOUT", "1s")

    with pytest.raises(MemlensError, match="cannot reach the Dask scheduler"):
        run(str(fleet_dir), scheduler=f"tcp://127.0.0.1:{free_port()}")


def test_a_relative_path_reaches_the_workers(fleet_dir, dask_processes, tmp_path, monkeypatch):
    import json
    import shutil

    from click.testing import CliRunner

    from memlens.cli.main import cli

    (tmp_path / "run").mkdir()
    for i in range(4):
        shutil.copy(fleet_dir / f"rank{i:05d}.pickle", tmp_path / "run")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["fleet", "run", "--scheduler", dask_processes, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["ranks_ok"], doc["ranks_failed"], doc["failure_reasons"]) == (4, 0, [])
    assert [row["path"] for row in doc["table"]] == [
        f"{tmp_path}/run/rank{i:05d}.pickle" for i in range(4)
    ]
    assert r.stderr == ""

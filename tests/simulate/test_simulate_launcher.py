"""`memlens simulate --nproc-per-node` (issue 22) as a command: one snapshot per rank
in a directory, the per-rank table, the ranks it simulates by default (rank 0 and the
last; the others assumed when those two match), failed ranks, `-m MODULE`, and the
same per-rank results from a local pool, a Dask LocalCluster and a scheduler with
worker processes. The script is tests/simulate/ddp_script.py (a DDP step of a two-layer
MLP; test_simulate_distributed.py works its bytes out by hand)."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from memlens.simulation.distributed.env import World, format_ranks  # noqa: E402
from memlens.units import format_bytes  # noqa: E402

SCRIPT = str(Path(__file__).with_name("ddp_script.py"))


def active_blocks(snapshot: dict[str, Any]) -> list[int]:
    return sorted(
        b["size"] for s in snapshot["segments"] for b in s["blocks"]
        if b["state"] == "active_allocated"
    )  # fmt: skip


def launcher(cwd: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """`memlens simulate ARGS` in `cwd`, one pool worker, no cuBLAS workspace."""
    return subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "--workers", "1",
         "--cublas-workspace", "0", *args],
        capture_output=True, text=True, cwd=cwd, timeout=timeout,
    )  # fmt: skip


def table_rows(stdout: str) -> dict[str, list[str]]:
    """The per-rank table's rows by their rank cell: [peak active, peak reserved,
    headroom, note...] (the table's rows are the right-aligned lines)."""
    rows = [line.split() for line in stdout.splitlines() if line[:1].isspace()]
    return {row[0]: row[1:] for row in rows if row and row[0][:1].isdigit()}


def test_probe_is_rank_0_and_the_last_and_format_ranks_joins_runs():
    assert World(4, 2).probe() == [0, 7] and World(2).probe() == [0, 1] == World(2).pick("all")
    assert World(1).probe() == [0]
    assert format_ranks([8, 0, 1, 2, 5, 7]) == "0-2, 5, 7-8" and format_ranks([3]) == "3"


# ---------------------------------------------------------------- the launcher
def test_launcher_writes_a_snapshot_per_rank_and_names_the_largest(tmp_path):
    (tmp_path / "job").mkdir()  # -o may name a directory that exists
    done = launcher(
        tmp_path, "--nproc-per-node", "2", "--device-memory", "1GiB", "-o", "job", SCRIPT,
        "--out", "marks{rank}.json", "--steps", "1", "--rank-extra", str(2**20),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == [
        "rank0.pickle",
        "rank1.pickle",
    ]
    for rank in (0, 1):
        env = json.loads((tmp_path / f"marks{rank}.json").read_text())["env"]
        assert env == {
            "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
            "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500",
        }  # fmt: skip
    peaks = {
        rank: pickle.loads((tmp_path / "job" / f"rank{rank}.pickle").read_bytes())
        for rank in (0, 1)
    }
    assert active_blocks(peaks[1]) == sorted([*active_blocks(peaks[0]), 2**20])
    assert "largest: rank 1" in done.stdout
    assert "memlens fleet: 2 ranks (2 ok, 0 failed)" in done.stdout


def test_launcher_refuses_ranks_outside_the_world_in_one_line(tmp_path):
    done = launcher(
        tmp_path, "--nproc-per-node", "2", "--ranks", "2", SCRIPT, "--out", "m.json", timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("memlens: error: --ranks '2'")


def test_launcher_reports_a_failing_rank_and_exits_1(tmp_path):
    done = launcher(
        tmp_path, "--nproc-per-node", "2", "-o", "job", SCRIPT, "--out", "marks{rank}.json",
        "--steps", "0", "--fail-rank", "0",
    )  # fmt: skip
    assert done.returncode == 1
    assert "RuntimeError: this rank fails" in done.stderr  # the script's own traceback
    rows = table_rows(done.stdout)
    assert "failed:" in rows["0"] and "failed:" not in rows["1"]
    assert "largest: rank 1" in done.stdout
    # said loudly, with which rank, and the other rank's snapshot still worth comparing
    assert "memlens: warning: 1 of 2 simulated ranks FAILED (0; their errors above)" in done.stderr
    assert done.stderr.rstrip().endswith("compare the ranks with: memlens fleet job")


def test_launcher_with_every_rank_failing_says_so_and_points_at_nothing(tmp_path):
    done = launcher(
        tmp_path, "--nproc-per-node", "3", "--ranks", "all", "-o", "job", SCRIPT,
        "--out", "m{rank}.json", "--steps", "0", "--fail-rank", "0", "--fail-rank", "1",
        "--fail-rank", "2",
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.rstrip().splitlines()[-1] == (
        "memlens: error: all 3 simulated ranks failed (0-2): nothing to compare; "
        "their errors are above"
    )
    assert "memlens fleet" not in done.stderr and "memlens fleet" not in done.stdout
    assert sorted(table_rows(done.stdout)) == ["0", "1", "2"]
    assert all(row[3] == "failed:" for row in table_rows(done.stdout).values())


def test_rank_table_names_the_simulated_and_the_assumed_ranks():
    from memlens.cli.simulate_ranks import rank_table
    from memlens.simulation.distributed.launch import RankResult

    mib = 2**20
    ran = [
        RankResult(r, f"rank{r}.pickle", 3 * mib, 4 * mib, oom="OOM", signature="s") for r in (0, 3)
    ]
    assert rank_table(ran, 2**30, [1, 2], symmetric=True) == "\n".join([
        "rank  peak active  peak reserved     headroom",
        "   0     3.00 MiB       4.00 MiB  1020.00 MiB  OOM",
        "   3     3.00 MiB       4.00 MiB  1020.00 MiB  OOM",
        " 1-2     3.00 MiB       4.00 MiB  1020.00 MiB  not simulated: assumed equal to rank 0, OOM",
        "largest: rank 0, peak reserved 4.00 MiB",
    ])  # fmt: skip
    assert rank_table(ran, None, [1, 2], symmetric=False).splitlines()[3:] == [
        " 1-2            -              -         -  not simulated",
        "largest: rank 0, peak reserved 4.00 MiB (of the simulated ranks)",
    ]


# ---------------------------------------------------------------- the default ranks
def test_default_simulates_rank_0_and_the_last_and_assumes_the_rest_when_they_match(tmp_path):
    done = launcher(
        tmp_path, "--nproc-per-node", "4", "--device-memory", "1GiB", "-o", "job", SCRIPT,
        "--out", "m{rank}.json", "--steps", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "job").iterdir()) == ["rank0.pickle", "rank3.pickle"]
    assert not (tmp_path / "m1.json").exists()  # ranks 1 and 2 never ran
    import memlens

    first, last = (memlens.load(tmp_path / "job" / f"rank{r}.pickle").device(0) for r in (0, 3))
    # DDP is symmetric: the same allocations, to the byte
    assert first.size[first.action == 0].tolist() == last.size[last.action == 0].tolist()
    figures = [
        format_bytes(first.peak_active_bytes),
        format_bytes(first.peak_reserved_bytes),
        format_bytes(2**30 - first.peak_reserved_bytes),
    ]
    rows = table_rows(done.stdout)
    assert [" ".join(rows[r][:6]) for r in ("0", "3")] == [" ".join(figures)] * 2
    # the ranks left out: one row, rank 0's figures, and said to be assumed
    assert " ".join(rows["1-2"]) == " ".join([*figures, "not simulated: assumed equal to rank 0"])
    assert "ranks 1-2 were not simulated and are assumed equal to rank 0" in done.stderr
    assert "the job looks symmetric" in done.stderr and "--ranks all" in done.stderr


def test_default_on_a_rank_dependent_job_says_the_ranks_differ(tmp_path):
    # rank 0 holds 1 MiB more than the others for the whole run (extra eval state)
    done = launcher(
        tmp_path, "--nproc-per-node", "4", "-o", "job", SCRIPT, "--out", "m{rank}.json",
        "--steps", "1", "--rank-extra", str(2**20), "--extra-on", "0",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    import memlens

    first, last = (memlens.load(tmp_path / "job" / f"rank{r}.pickle").device(0) for r in (0, 3))
    assert first.peak_active_bytes == last.peak_active_bytes + 2**20
    rows = table_rows(done.stdout)
    assert " ".join(rows["1-2"]) == "- - - not simulated"
    assert "largest: rank 0" in done.stdout and "(of the simulated ranks)" in done.stdout
    assert (
        f"memlens: warning: ranks 0 and 3 differ (peak reserved "
        f"{format_bytes(first.peak_reserved_bytes)} against "
        f"{format_bytes(last.peak_reserved_bytes)}, peak active "
        f"{format_bytes(first.peak_active_bytes)} against "
        f"{format_bytes(last.peak_active_bytes)}): the job is not symmetric, and ranks 1-2 "
        "were not simulated; simulate them with --ranks all" in done.stderr
    )
    assert "assumed" not in done.stdout


# ---------------------------------------------------------------- -m MODULE, Dask
# One job three ways and a fourth as a module: world 2, rank 1 holding 1 MiB more (so a
# result landing on the wrong rank shows). Each rank's peaks and the requested size of
# every allocation, in order, must be the local pool's.
JOB = ("--nproc-per-node", "2", "--ranks", "all")
JOB_ARGS = ("--out", "m{rank}.json", "--steps", "1", "--rank-extra", str(2**20))


def per_rank(job: Path) -> dict[int, tuple[int, int, list[int]]]:
    import memlens

    out = {}
    for rank in (0, 1):
        d = memlens.load(job / f"rank{rank}.pickle").device(0)
        out[rank] = (d.peak_active_bytes, d.peak_reserved_bytes, d.size[d.action == 0].tolist())
    return out


@pytest.fixture(scope="module")
def local_job(tmp_path_factory) -> tuple[dict[int, tuple[int, int, list[int]]], dict[str, Any]]:
    cwd = tmp_path_factory.mktemp("local")
    done = launcher(cwd, *JOB, "-o", "job", SCRIPT, *JOB_ARGS)
    assert done.returncode == 0, done.stderr
    return per_rank(cwd / "job"), table_rows(done.stdout)


def test_the_local_pool_job_is_rank_1_plus_its_extra_mebibyte(local_job):
    figures, _ = local_job
    assert figures[1][0] == figures[0][0] + 2**20
    assert sorted(figures[1][2]) == sorted([*figures[0][2], 2**20])


def test_launcher_runs_a_module_with_dash_m(tmp_path, local_job):
    (tmp_path / "ddpjob.py").write_text(Path(SCRIPT).read_text())  # importable from cwd
    done = launcher(tmp_path, *JOB, "-o", "job", "-m", "ddpjob", *JOB_ARGS)
    assert done.returncode == 0, done.stderr
    assert (per_rank(tmp_path / "job"), table_rows(done.stdout)) == local_job
    # it ran as rank 1 of 2, in the launcher's directory
    env = json.loads((tmp_path / "m1.json").read_text())["env"]
    assert (env["RANK"], env["WORLD_SIZE"]) == ("1", "2")


# A script that leaves state in an imported module (as a cache in a library would): a
# second run in the same process sees it and allocates more.
STATEFUL = """
import torch
runs = getattr(torch, "_memlens_test_runs", 0) + 1
torch._memlens_test_runs = runs
x = torch.empty(runs * 2**20, dtype=torch.uint8, device="cuda")
"""


def test_one_worker_for_both_ranks_gives_the_same_ranks(tmp_path, local_job):
    # a pool worker handed a second rank (here the only worker; under load, one that
    # started first) runs it in a fresh interpreter: nothing of the first rank's run (its
    # process group, torch's patches, the script's module) leaks into the second
    done = launcher(tmp_path, *JOB, "--workers", "1", "-o", "job", SCRIPT, *JOB_ARGS)
    assert done.returncode == 0, done.stderr
    assert (per_rank(tmp_path / "job"), table_rows(done.stdout)) == local_job
    (tmp_path / "stateful.py").write_text(STATEFUL)
    done = launcher(tmp_path, *JOB, "--workers", "1", "-o", "st", str(tmp_path / "stateful.py"))
    assert done.returncode == 0, done.stderr
    import memlens

    peaks = [
        memlens.load(tmp_path / "st" / f"rank{r}.pickle").device(0).peak_active_bytes
        for r in (0, 1)
    ]
    assert peaks == [2**20, 2**20]  # 2 MiB for the second rank when it ran where the first did


@pytest.mark.slow
def test_launcher_on_a_dask_local_cluster_gives_the_local_pools_ranks(tmp_path, local_job):
    pytest.importorskip("distributed")
    done = launcher(
        tmp_path, *JOB, "--scheduler", "dask-local", "--workers", "2", "-o", "job", SCRIPT,
        *JOB_ARGS,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (per_rank(tmp_path / "job"), table_rows(done.stdout)) == local_job
    assert "on Dask LocalCluster (2 workers)" in done.stdout  # the comparison ran there too


@pytest.mark.slow
def test_launcher_on_a_scheduler_and_worker_processes_gives_the_local_pools_ranks(
    tmp_path, local_job, dask_processes
):
    # dask_processes (tests/dask_cluster.py): a scheduler and two worker processes in /,
    # the launcher in tmp_path: the snapshots' directory reaches them absolute, and each
    # rank runs in the launcher's directory (its m{rank}.json)
    done = launcher(tmp_path, *JOB, "--scheduler", dask_processes, "-o", "job", SCRIPT, *JOB_ARGS)
    assert done.returncode == 0, done.stderr
    assert (per_rank(tmp_path / "job"), table_rows(done.stdout)) == local_job
    assert f"on Dask cluster at {dask_processes}" in done.stdout
    assert sorted(p.name for p in tmp_path.glob("m*.json")) == ["m0.json", "m1.json"]

"""`memlens fleet` on the local process pool: the planted outliers and nothing else, every
rank's figures equal to `memlens summary --json`, a failed row for an unreadable file, a
worker SIGKILLed mid-run, the CLI's text, JSON and Parquet."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from fleet_data import PLANTED, RANKS, KillFirstWorker

from memlens.cli.main import cli
from memlens.fleet.api import run
from memlens.fleet.record import SUMMARY_FIGURES


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def result(fleet_dir):
    return run(str(fleet_dir), workers=2)


def test_the_planted_outliers_and_nothing_else(result):
    assert result["ranks_total"] == RANKS and result["ranks_failed"] == 0
    assert result["rank_source"] == "file name"
    assert sorted(o["rank"] for o in result["outliers"]) == sorted(PLANTED)
    assert [r["rank"] for r in result["table"]] == list(range(RANKS))
    assert {r["rank"] for r in result["table"] if r["outlier"]} == set(PLANTED)
    by_rank = {o["rank"]: o for o in result["outliers"]}
    top = {rank: by_rank[rank]["figures"][0]["name"] for rank in PLANTED}
    # each is found by what was planted: the leaked tensors (category "other": alive at
    # the end, made outside any optimizer or backward), the activations, the extra layers
    assert top[5] == "category:other"
    assert top[23] == "category:activation"
    names42 = {f["name"] for f in by_rank[42]["figures"]}
    assert {"category:parameter", "category:optimizer_state", "end_active_bytes"} <= names42


def test_each_outlier_is_diffed_against_the_median_rank(result):
    base = result["median_rank"]
    assert base not in PLANTED
    by_rank = {o["rank"]: o for o in result["outliers"]}
    leak = by_rank[5]["diff"]["sites"][0]
    assert (leak["site"], leak["status"], leak["a_bytes"]) == (
        "train_step (/home/user/project/train.py:41)", "only_b", 0)  # fmt: skip
    pipeline_new = {s["site"] for s in by_rank[42]["diff"]["sites"] if s["status"] == "only_b"}
    assert "forward (/home/user/project/model.py:44)" in pipeline_new
    assert by_rank[23]["diff"]["figures"][0]["name"] == "peak_active_bytes"
    assert by_rank[23]["diff"]["figures"][0]["change"] > 0


def test_groups_and_stages(result):
    groups = result["groups"]
    assert groups[0]["count"] == RANKS - len(PLANTED)
    assert sorted(r for g in groups[1:] for r in g["ranks"]) == sorted(PLANTED)
    assert {s["stage"] for s in result["stages"]} == {
        "ProfilerStep", "forward", "backward", "Optimizer.step#AdamW.step",
        "Optimizer.zero_grad#AdamW.zero_grad"}  # fmt: skip
    # the pipeline rank (1.5x the layers) holds the most in every stage
    assert all(s["max_rank"] == 42 for s in result["stages"])


def test_figures_equal_memlens_summary_json_to_the_byte(result, fleet_dir):
    for row in result["table"]:
        r = invoke("summary", row["path"], "--json")
        assert r.exit_code == 0
        (dev,) = json.loads(r.output)["devices"]
        for key in (*SUMMARY_FIGURES, "ooms", "top_sites", "device"):
            assert json.dumps(row[key]) == json.dumps(dev[key]), (row["rank"], key)


def test_stage_and_category_figures_equal_their_commands(result):
    row = result["table"][23]
    stages = json.loads(invoke("stages", row["path"], "--json").output)
    peaks: dict[str, int] = {}
    for s in stages["stages"]:
        peaks[s["base_name"]] = max(peaks.get(s["base_name"], 0), s["peak_bytes"])
    assert row["stage_peaks"] == peaks
    cats = json.loads(invoke("categories", row["path"], "--json").output)
    assert row["category_bytes"] == {c["name"]: c["bytes"] for c in cats["categories"]}


def test_an_unreadable_file_is_a_failed_row(tmp_path, fleet_dir):
    for i in range(3):
        shutil.copy(fleet_dir / f"rank{i:05d}.pickle", tmp_path)
    (tmp_path / "rank00003.pickle").write_bytes(b"\x80\x04not a snapshot")
    r = run([str(tmp_path), str(tmp_path / "rank00009.pickle")], workers=2)
    assert [(f["rank"], str(f["reason"]).count("\n")) for f in r["failed"]] == [(3, 0), (9, 0)]
    assert str(r["failed"][0]["reason"]).startswith(f"{tmp_path}/rank00003.pickle")
    assert r["failed"][1]["reason"] == f"{tmp_path}/rank00009.pickle: no such file"
    assert [row["status"] for row in r["table"]] == ["ok", "ok", "ok", "failed", "failed"]


def test_a_worker_killed_mid_run_is_retried_and_every_rank_comes_once(fleet_dir):
    kill_one = KillFirstWorker()
    r = run(str(fleet_dir), workers=2, on_record=kill_one, diffs=0)
    assert kill_one.killed
    assert sorted(kill_one.seen) == list(range(RANKS))  # each rank reported once
    assert [row["rank"] for row in r["table"]] == list(range(RANKS))
    assert r["ranks_failed"] == 0
    assert sorted(o["rank"] for o in r["outliers"]) == sorted(PLANTED)


def test_cli_text_json_and_parquet(fleet_dir, tmp_path):
    out, html = tmp_path / "fleet.parquet", tmp_path / "fleet.html"
    r = invoke("fleet", str(fleet_dir), "--workers", "2", "--out", str(out), "--diffs", "1",
            "--report", str(html))  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "64 ranks (64 ok, 0 failed) on local pool (2 processes)" in r.output
    assert "outliers (3;" in r.output and "groups (" in r.output
    # --diffs 1: the leak rank (largest |z|) against the median rank, its new call site first
    diffed = r.output.split("rank 5 vs median rank ")[1].splitlines()
    assert (
        diffed[1] == "   +440.00 KiB  train_step (/home/user/project/train.py:41)  (only in rank 5)"
    )
    page = html.read_text()
    assert page.count("<rect") == RANKS * 5 and page.count("<title>outlier: rank") == 3
    import pyarrow.parquet as pq

    table = pq.read_table(out)
    assert table.num_rows == RANKS
    cols = table.column_names
    assert {"rank", "peak_active_bytes", "outlier", "stage.forward.peak_bytes",
            "category.activation.bytes"} <= set(cols)  # fmt: skip
    assert sorted(r for r, o in zip(table["rank"].to_pylist(), table["outlier"].to_pylist())
                  if o) == sorted(PLANTED)  # fmt: skip
    # --json (on a glob of four ranks: the figures were checked above)
    j = invoke("fleet", str(fleet_dir / "rank0000[0-3].pickle"), "--workers", "2", "--json")
    doc = json.loads(j.output)
    assert doc["schema"] == 1 and [row["rank"] for row in doc["table"]] == [0, 1, 2, 3]
    assert doc["outliers"] == [] and doc["ranks_failed"] == 0


def test_cli_errors_are_one_line(fleet_dir):
    from memlens.cli.main import main

    for args in (["fleet", str(fleet_dir), "--rank-regex", "nope(\\d+)"],
                 ["fleet", str(fleet_dir), "--scheduler", "bogus"],
                 ["fleet", str(fleet_dir / "*.json")]):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            main(args)
        assert exc.value.code == 2


def test_memlens_generate_ranks_writes_a_fleet_with_its_skews(tmp_path):
    out = tmp_path / "job"
    r = invoke("generate", str(out), "--ranks", "8", "--skew", "leak:2", "--skew",
            "activations:5", "--events", "1000")  # fmt: skip
    assert r.exit_code == 0 and "wrote 8 rank files" in r.output
    assert sorted(p.name for p in out.iterdir())[:2] == ["rank00000.pickle", "rank00001.pickle"]
    result = run(str(out), workers=2, diffs=0)
    assert sorted(o["rank"] for o in result["outliers"]) == [2, 5]


def test_the_cache_is_used_only_when_the_fleet_fits_in_it(tmp_path, fleet_dir, monkeypatch):
    from memlens.snapshot.store import cache

    for i in range(3):
        shutil.copy(fleet_dir / f"rank{i:05d}.pickle", tmp_path)
    root = cache.cache_root()
    monkeypatch.setattr(cache, "MAX_ENTRIES", 2)  # 3 ranks do not fit: no entry written
    run(str(tmp_path), workers=1, diffs=0)
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.startswith(".")]
    monkeypatch.setattr(cache, "MAX_ENTRIES", 32)
    run(str(tmp_path), workers=1, diffs=0)
    assert len([p for p in root.iterdir() if not p.name.startswith(".")]) == 3


def test_a_file_that_kills_its_worker_is_the_only_failed_row():
    from fleet_data import die_on_poison

    from memlens.execution.executors import LocalPool, TaskLost

    items = ["a", "b", "poison", "c", "d", "e", "f"]
    pool = LocalPool(2)
    try:
        got = dict(pool.map_unordered(die_on_poison, items))
    finally:
        pool.close()
    assert sorted(got) == list(range(len(items)))  # each task exactly once
    assert got[2] == TaskLost("its worker process died while reading it (twice)")
    assert [got[i] for i in (0, 1, 3, 4, 5, 6)] == ["A", "B", "C", "D", "E", "F"]


def test_failed_ranks_are_counted_by_reason_and_warned_about(tmp_path, fleet_dir):
    for i in range(2):
        shutil.copy(fleet_dir / f"rank{i:05d}.pickle", tmp_path)
    (tmp_path / "rank00002.pickle").write_bytes(b"\x80\x04not a snapshot")
    args = [str(tmp_path), str(tmp_path / "rank00007.pickle"), str(tmp_path / "rank00008.pickle")]
    r = CliRunner().invoke(cli, ["fleet", *args, "--workers", "1", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["ranks_total"], doc["ranks_ok"], doc["ranks_failed"]) == (5, 2, 3)
    assert doc["failure_reasons"][0] == {"reason": "FILE: no such file", "ranks": 2,
                                         "first_rank": 7}  # fmt: skip
    assert doc["failure_reasons"][1]["ranks"] == 1
    assert doc["failure_reasons"][1]["first_rank"] == 2
    assert r.stderr.startswith("memlens: warning: 3 of 5 ranks failed and are left out: "
                               "FILE: no such file (2 ranks) and 1 other reason")  # fmt: skip


def test_every_rank_failed_exits_1_with_the_reasons(tmp_path):
    missing = [str(tmp_path / f"rank{i}.pickle") for i in range(3)]
    r = CliRunner().invoke(cli, ["fleet", *missing, "--workers", "1"])
    assert r.exit_code == 1
    assert r.stderr.strip() == (
        "memlens: error: every rank failed (3 of 3): FILE: no such file (3 ranks)"
    )
    assert "no outliers" not in r.stdout
    assert "no rank could be read" in r.stdout
    assert "        3 ranks  FILE: no such file  (first: rank 0)" in r.stdout


class HiddenFilesPool:
    """An executor whose workers cannot see the files: the directory is moved away
    while the tasks run (as on a worker without the shared file system) and put back."""

    name = "test cluster"

    def __init__(self, directory) -> None:
        self.directory = directory

    def map_unordered(self, fn, items):
        away = self.directory.with_name(self.directory.name + "-away")
        self.directory.rename(away)
        try:
            results = [(i, fn(item)) for i, item in enumerate(items)]
        finally:
            away.rename(self.directory)
        yield from results

    def close(self) -> None:
        pass


def test_workers_that_cannot_see_the_files_are_one_error(tmp_path, fleet_dir):
    from memlens.errors import MemlensError

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for i in range(3):
        shutil.copy(fleet_dir / f"rank{i:05d}.pickle", ranks)
    with pytest.raises(MemlensError) as exc:
        run(str(ranks), executor=HiddenFilesPool(ranks), diffs=0)
    assert str(exc.value).startswith(
        f"the workers of the test cluster cannot see the snapshot files: {ranks}/rank00000"
        ".pickle exists here, but worker "
    )
    assert str(exc.value).endswith(
        "found no such file (nor any of the 3 files); every worker "
        "must read them at the same path (a shared file system)"
    )

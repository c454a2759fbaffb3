"""Ranks (devices and files) and SQL over the columnar model."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from analysis_snapshots import BIG_SIZE, training_segments, training_snapshot, training_trace

import memlens
from memlens.analysis.ranks import ranks, traces_of
from memlens.analysis.sql import query
from memlens.cli.main import main
from memlens.errors import MemlensError


def two_device_snapshot() -> dict[str, Any]:
    return {
        "segments": training_segments(0) + training_segments(1),
        "device_traces": [training_trace(), training_trace(2_000_000)],
    }


def test_ranks_across_devices_and_files():
    snap = memlens.load(two_device_snapshot())
    r = ranks(traces_of([("x", snap)]))
    assert [x["label"] for x in r["ranks"]] == ["x:0", "x:1"]
    assert [x["peak_active_bytes"] for x in r["ranks"]] == [1610 + BIG_SIZE, 1610 + 2_000_000]
    im = r["imbalance"]
    assert im is not None
    assert (im["spread_bytes"], im["max_label"], im["min_label"]) == (500_000, "x:1", "x:0")
    assert im["max_over_mean"] == pytest.approx((1610 + 2e6) / (1610 + 1.75e6), rel=1e-6)
    assert r["sites"] == [{"site": "forward (/home/u/model.py:20)",
                           "bytes": [BIG_SIZE + 110, 2_000_110], "spread_bytes": 500_000}]  # fmt: skip
    one = memlens.load(training_snapshot())
    r2 = ranks(traces_of([("a", one), ("b", snap)], device=0))
    assert [x["label"] for x in r2["ranks"]] == ["a:0", "b:0"]
    assert r2["imbalance"] is not None
    assert r2["imbalance"]["spread_bytes"] == 0 and r2["sites"] == []
    with pytest.raises(MemlensError, match="device 1"):
        traces_of([("a", one)], device=1)


@pytest.fixture(scope="module")
def snap():
    return memlens.load(training_snapshot())


def test_sql_tables(snap):

    def q(sql: str) -> list[list[Any]]:
        return query(snap, sql)["rows"]

    assert q("select count(*) from events") == [[22]]
    assert q("select action, count(*) from events group by 1 order by 1") == [
        ["alloc", 10], ["free_completed", 5], ["free_requested", 5],
        ["segment_alloc", 1], ["segment_free", 1]]  # fmt: skip
    assert q("select count(*), sum(size) from allocations where live_at_end") == [[6, 1525]]
    assert q("select max(active_after) from events") == [[1610 + BIG_SIZE]]
    assert q("select addr, version from allocations where alloc_event = 9") == [[0x100400, 1]]
    assert q("select count(*) from allocations where ghost and alloc_event is null") == [[1]]
    assert q("select free_event from allocations where alloc_event = 4") == [[None]]
    assert q("select count(*) from annotations where stage = 'START'") == [[4]]
    assert q("select name from frames where kind = 'python' order by 1") == [
        ["_init_group"], ["forward"], ["train"]]  # fmt: skip
    assert q("select state, count(*) from blocks group by 1 order by 1") == [
        ["active_allocated", 6], ["inactive", 3]]  # fmt: skip
    assert q("select count(*), sum(total_size) from segments") == [[1, 1024 * 1024]]
    # the site of the peak's biggest allocation, by SQL
    rows = q("select f.name from allocations a join stack_frames f on f.stack_id = a.stack_id "
             "where a.size = 1500000 and f.depth = 0")  # fmt: skip
    assert rows == [["forward"]]
    assert q("select value from strings where id = 0") == [[snap.strings[0]]]


def test_sql_errors_and_limit(snap):
    with pytest.raises(MemlensError, match="SQL"):
        query(snap, "select nope from events")
    r = query(snap, "select idx from events order by idx", limit=3)
    assert r["rows"] == [[0], [1], [2]] and r["truncated"]


def test_cli_sql_and_ranks(tmp_path, capsys):
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(two_device_snapshot(), protocol=4))
    main(["sql", str(p), "select device, count(*) n from events group by 1 order by 1", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["columns"] == ["device", "n"] and out["rows"] == [[0, 22], [1, 22]]
    main(
        [
            "sql",
            str(p),
            "select idx, action from events where idx < 2 and device = 0 order by 1",
            "--csv",
        ]
    )
    assert capsys.readouterr().out.splitlines() == ["idx,action", "0,alloc", "1,alloc"]
    main(["ranks", str(p), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["imbalance"]["spread_bytes"] == 500_000


def test_real_sql(shared_snapshots_dir, expected_figures):
    for name, exp in list(expected_figures.items())[:3]:
        snap = memlens.load(shared_snapshots_dir / name)
        r = query(
            snap, f"select count(*), max(active_after) from events where device = {exp['device']}"
        )
        n, peak = r["rows"][0]
        assert n == exp["trace_entries"]
        assert max(peak, exp["baseline_bytes"]) == exp["peak_active_bytes"]
        r = query(snap, "select sum(size) from allocations where live_at_end")
        assert r["rows"][0][0] == exp["end_active_bytes"]


def test_sql_doc_examples_run(snap):
    """Every example query in docs/sql.md runs."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "sql.md").read_text()
    block = text.split("```sql")[1].split("```")[0]
    stmts = [s.strip() for s in block.split(";") if s.strip()]
    assert len(stmts) >= 5
    for stmt in stmts:
        sql = "\n".join(ln for ln in stmt.splitlines() if not ln.strip().startswith("--"))
        query(snap, sql, limit=5)


def test_every_table_and_column_is_documented(snap):
    """docs/sql.md names every table the connection has, and every column of each."""
    from memlens.analysis.sql import connect

    text = (Path(__file__).resolve().parents[2] / "docs" / "sql.md").read_text()
    con = connect(snap)
    tables = [r[0] for r in con.execute("show tables").fetchall()]
    assert {"events", "allocations", "frames", "stacks", "stack_frames", "strings",
            "segments", "blocks", "annotations"} <= set(tables)  # fmt: skip
    for t in tables:
        assert f"`{t}`" in text, t
        if t.startswith("_"):  # the raw id-coded tables behind views: named, not detailed
            continue
        for (col,) in con.execute(f"select column_name from (describe {t})").fetchall():
            assert re.search(rf"[|`,(] ?{col}`?[ ,|)]", text), (t, col)


# (every --json command is documented and typed: test_json_schema.py)

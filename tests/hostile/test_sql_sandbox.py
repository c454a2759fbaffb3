"""`memlens sql` cannot touch files, the network or extensions unless --allow-files
(issue 16, point 8)."""

from __future__ import annotations

import json
import pickle

import pytest
from click.testing import CliRunner
from corpus import base_snapshot

import memlens
from memlens.cli.main import cli
from memlens.errors import MemlensError

pytest.importorskip("duckdb")
from memlens.analysis.sql import query  # noqa: E402


@pytest.fixture
def snap():
    return memlens.load(base_snapshot())


@pytest.mark.parametrize(
    "sql",
    [
        "select * from read_csv('{secret}')",
        "select * from read_text('{secret}')",
        "copy (select 1) to '{out}'",
        "attach '{out}' as x",
        "install httpfs",
        "load httpfs",
        "select * from 'https://example.com/x.parquet'",
        "select * from glob('{dir}/*')",
        "set enable_external_access = true",
        "set lock_configuration = false",
    ],
)
def test_sandbox_refuses_files_network_extensions(snap, tmp_path, sql):
    secret = tmp_path / "secret.csv"
    secret.write_text("a\n1\n")
    out = tmp_path / "written.csv"
    with pytest.raises(MemlensError, match="SQL: "):
        query(snap, sql.format(secret=secret, out=out, dir=tmp_path))
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.csv"]


def test_tables_still_work_in_the_sandbox(snap):
    assert query(snap, "select count(*) from events")["rows"] == [[7]]


def test_allow_files_opts_in(snap, tmp_path):
    secret = tmp_path / "data.csv"
    secret.write_text("a\n41\n")
    got = query(snap, f"select a + 1 from read_csv('{secret}')", allow_files=True)
    assert got["rows"] == [[42]]


def test_cli_error_says_how_to_opt_in(tmp_path):
    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(base_snapshot(), protocol=4))
    csv = tmp_path / "x.csv"
    csv.write_text("a\n5\n")
    runner = CliRunner()
    refused = runner.invoke(cli, ["sql", str(p), f"select * from read_csv('{csv}')"])
    assert refused.exit_code != 0 and "--allow-files" in str(refused.exception)
    allowed = runner.invoke(
        cli, ["sql", str(p), f"select * from read_csv('{csv}')", "--allow-files", "--json"]
    )
    assert allowed.exit_code == 0, allowed.output
    assert json.loads(allowed.output)["rows"] == [[5]]

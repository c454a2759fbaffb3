"""Issue 27 items 8 and 9: `memlens sql` output escapes control characters as every other
text output does, names with a lone surrogate go through `sql` and `export --parquet`, and
--allow-files never lets DuckDB download anything."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner
from corpus import base_snapshot

import memlens
from memlens.cli.main import cli
from memlens.errors import MemlensError

pytest.importorskip("duckdb")
from memlens.analysis.sql import WITH_FILES, query  # noqa: E402

HOSTILE = "esc\x1b]0;pwned\x07 csi\x1b[2J bel\x07 c1\x9b nul\x00 bidi\u202e lone\ud800"
ESCAPED = "esc\\x1b]0;pwned\\x07 csi\\x1b[2J bel\\x07 c1\\x9b nul\\x00 bidi\\u202e lone\\ud800"


@pytest.fixture
def hostile_path(tmp_path: Path) -> Path:
    snap = base_snapshot()
    for t in snap["device_traces"]:
        for e in t:
            for fr in e.get("frames") or []:
                fr["name"] = HOSTILE
    p = tmp_path / "hostile.pickle"
    p.write_bytes(pickle.dumps(snap, protocol=4))
    return p


QUERY = "select distinct name from frames where name like 'esc%'"


@pytest.mark.parametrize("fmt", [[], ["--csv"]])
def test_sql_text_output_shows_escapes(hostile_path: Path, fmt: list[str], monkeypatch) -> None:
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    got = CliRunner().invoke(cli, ["sql", str(hostile_path), QUERY, *fmt])
    assert got.exit_code == 0, got.output
    assert ESCAPED in got.output
    for raw in ("\x1b", "\x07", "\x9b", "\x00", "\u202e", "\ud800"):
        assert raw not in got.output


def test_sql_json_carries_the_name(hostile_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    got = CliRunner().invoke(cli, ["sql", str(hostile_path), QUERY, "--json"])
    assert got.exit_code == 0, got.output
    # JSON escapes controls itself; the lone surrogate arrives as its escape's text
    assert json.loads(got.output)["rows"] == [[HOSTILE.replace("\ud800", "\\ud800")]]


def test_parquet_export_carries_the_name(hostile_path: Path, tmp_path: Path, monkeypatch) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    out = tmp_path / "pq"
    got = CliRunner().invoke(cli, ["export", str(hostile_path), "--parquet", str(out)])
    assert got.exit_code == 0, got.output
    names = pq.read_table(out / "frames.parquet").column("name").to_pylist()
    assert HOSTILE.replace("\ud800", "\\ud800") in names


@pytest.mark.parametrize(
    "sql",
    [
        "install httpfs",
        "INSTALL httpfs FROM 'http://127.0.0.1:9/'",
        "force install httpfs",
        "select 1; /* a comment */ install httpfs",
        "update extensions",
        "set autoinstall_known_extensions = true",
        "set custom_extension_repository = 'http://127.0.0.1:9/'",
    ],
)
def test_allow_files_never_downloads(sql: str) -> None:
    snap = memlens.load(base_snapshot())
    with pytest.raises(MemlensError, match="SQL: "):
        query(snap, sql, allow_files=True)


def test_allow_files_has_autoload_and_autoinstall_off() -> None:
    assert WITH_FILES["autoload_known_extensions"] is False
    assert WITH_FILES["autoinstall_known_extensions"] is False
    snap = memlens.load(base_snapshot())
    got = query(snap, "select current_setting('autoload_known_extensions') as a", allow_files=True)
    assert got["rows"] == [[False]]


def test_fleet_keeps_a_rank_whose_names_hold_a_lone_surrogate(hostile_path: Path) -> None:
    from memlens.fleet.record import stack_fingerprint

    snap = memlens.load(hostile_path, cache=False)
    fingerprint = stack_fingerprint(snap.traces[0])  # raised UnicodeEncodeError: rank "failed"
    assert len(fingerprint) == 16

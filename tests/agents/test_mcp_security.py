"""What an agent may make the MCP server do (issue 33), driven through the MCP SDK's own
client as a host would: nothing runs code unless the person who started the server said
`--allow-run`, and then only under `--root`; the read-only hints say the truth; every file
fleet reads is checked against the roots after its glob or folder is expanded."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_mcp_server import call, drive, error

from memlens.cli.main import cli

mcp = pytest.importorskip("mcp")


def _marker_script(folder: Path, marker: Path) -> Path:
    """A script that, if anything runs it, leaves `marker` behind."""
    script = folder / "writes.py"
    script.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    return script


def test_advise_script_is_refused_without_allow_run(tmp_path: Path, hand_file: Path) -> None:
    marker = tmp_path / "ran"
    script = _marker_script(tmp_path, marker)

    async def body(s: Any) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert "script" not in tools["advise"].input_schema["properties"]
        assert "gpu" not in tools["advise"].input_schema["properties"]
        # every tool offered only reads: the hint is true for all of them
        assert {t.annotations.read_only_hint for t in tools.values()} == {True}
        line = await error(s, "advise", snapshot=str(hand_file), script=str(script))
        assert line == (
            "memlens: error: advise: script runs a script, which this server does not allow "
            "(the person who starts it can: memlens mcp --allow-run)"
        )
        # the zipfile trick of the issue: a standard-library module as the script
        line = await error(s, "advise", snapshot=str(hand_file), script="zipfile.py -c x y")
        assert "does not allow" in line

    drive(body)
    assert not marker.exists()


def test_allow_run_offers_the_script_under_the_roots_only(tmp_path: Path, hand_file: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    marker = tmp_path / "ran"
    outside = _marker_script(tmp_path, marker)
    inside = root / "in.pickle"
    inside.write_bytes(hand_file.read_bytes())

    async def body(s: Any) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert "script" in tools["advise"].input_schema["properties"]
        # a tool that runs code is not announced read-only; the others still are
        assert tools["advise"].annotations.read_only_hint is False
        assert tools["summary"].annotations.read_only_hint is True
        line = await error(s, "advise", snapshot=str(inside), script=f"{outside} --x")
        assert line == (
            f"memlens: error: {outside}: outside the folders this server may read ({root})"
        )

    drive(body, "mcp", "--allow-run", "--root", str(root))
    assert not marker.exists()


def test_allow_run_refuses_a_working_folder_outside_the_roots(
    tmp_path: Path, hand_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The script would run in the server's folder: it must be under the roots too."""
    root = tmp_path / "root"
    root.mkdir()
    marker = tmp_path / "ran"
    script = _marker_script(root, marker)
    (root / "in.pickle").write_bytes(hand_file.read_bytes())
    monkeypatch.chdir(tmp_path)  # the server starts here, outside the root

    async def body(s: Any) -> None:
        line = await error(s, "advise", snapshot=str(root / "in.pickle"), script=str(script))
        assert line == (
            f"memlens: error: the folder the script would run in ({tmp_path}): outside the "
            f"folders this server may read ({root})"
        )

    drive(body, "mcp", "--allow-run", "--root", str(root))
    assert not marker.exists()


def test_capabilities_show_allow_run() -> None:
    out = CliRunner().invoke(cli, ["capabilities", "--json"])
    mcp_command = next(c for c in json.loads(out.output)["commands"] if c["name"] == "mcp")
    flags = {f for p in mcp_command["params"] for f in p["flags"]}
    assert {"--allow-run", "--max-calls", "--call-timeout"} <= flags


def _outside_tree(tmp_path: Path, hand_file: Path) -> tuple[Path, Path]:
    """root/ranks/ with one snapshot, and outside/ next to root with a secret and a pickle."""
    root = tmp_path / "root"
    (root / "ranks").mkdir(parents=True)
    (root / "ranks" / "rank0.pickle").write_bytes(hand_file.read_bytes())
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.pickle").write_bytes(b"SECRET-BYTES-0123456789")
    return root, outside


def test_fleet_glob_through_dotdot_is_refused(tmp_path: Path, hand_file: Path) -> None:
    root, _ = _outside_tree(tmp_path, hand_file)
    pattern = f"{root}/*/../../outside/*.pickle"

    async def body(s: Any) -> None:
        line = await error(s, "fleet", paths=[pattern])
        assert line == (
            f"memlens: error: {pattern} (a file it names): outside the folders this server "
            f"may read ({root})"
        )
        assert "SECRET" not in line

    drive(body, "mcp", "--root", str(root))


def test_fleet_symlink_in_a_listed_folder_is_refused(tmp_path: Path, hand_file: Path) -> None:
    root, outside = _outside_tree(tmp_path, hand_file)
    (root / "ranks" / "rank1.pickle").symlink_to(outside / "secret.pickle")
    (root / "ranks" / "rank2.pickle").symlink_to("/etc/passwd")
    folder = str(root / "ranks")

    async def body(s: Any) -> None:
        line = await error(s, "fleet", paths=[folder])
        assert line == (
            f"memlens: error: {folder} (a file it names): outside the folders this server "
            f"may read ({root})"
        )
        assert "SECRET" not in line and "root:" not in line
        # a link that stays inside the roots is read as the file it points to
        (root / "ranks" / "rank1.pickle").unlink()
        (root / "ranks" / "rank2.pickle").unlink()
        (root / "ranks" / "rank1.pickle").symlink_to(root / "ranks" / "rank0.pickle")
        (root / "ranks" / "rank3.pickle").write_bytes(hand_file.read_bytes())
        fleet = await call(s, "fleet", paths=[folder], workers=1000)
        assert fleet["ranks_ok"] == 2  # rank1 is rank0's file: read once

    drive(body, "mcp", "--root", str(root))


def test_fleet_workers_are_capped_at_the_cores() -> None:
    from memlens.cli.fleet import _check

    own = {"threshold": 3.5, "tolerance": 0.05, "diffs": 10, "top": 10, "workers": 60}
    assert _check(**own)["workers"] == min(60, os.cpu_count() or 1)
    with pytest.raises(Exception, match="--workers must be at least 1"):
        _check(**{**own, "workers": 0})


def test_nul_and_overlong_paths_are_one_error_line(hand_file: Path) -> None:
    async def body(s: Any) -> None:
        assert await error(s, "open_snapshot", path="a\0b") == (
            "memlens: error: a?b: a path cannot contain NUL"
        )
        line = await error(s, "open_snapshot", path="a" * 1_000_000)
        assert line == (
            f"memlens: error: {'a' * 300}… (1,000,000 characters): the path is longer than "
            "the system allows"
        )
        assert await error(s, "open_snapshot", path="/proc/self/mem") == (
            "memlens: error: /proc/self/mem: not a regular file (a kernel file under /proc)"
        )

    drive(body)


if sys.platform != "linux":  # /proc and the symlink cases are Linux's
    pytestmark = pytest.mark.skip("Linux paths")

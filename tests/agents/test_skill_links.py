"""`memlens skill install` never writes through a symbolic link (issue 33): not through a
link at a temporary name, not into a linked skill folder (a project can ship one for
--scope project), and a link at the skill's own name is replaced, not written through."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from memlens.agents.resources import SKILL
from memlens.cli.main import run

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX links")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return proj


def _install(capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = run(["skill", "install", "--scope", "project"])
    out, err = capsys.readouterr()
    return code, out + err


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A file a link will point at: it must keep its text."""
    path = tmp_path / "victim.txt"
    path.write_text("precious\n")
    return path


@pytest.fixture
def folder(project: Path) -> Path:
    """Claude Code's project skill folder, made as a first install would."""
    path = project / ".claude" / "skills" / "memlens"
    path.mkdir(parents=True)
    return path


def test_a_link_at_the_old_temporary_name_is_not_followed(
    folder: Path, victim: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for pid in range(os.getpid() - 5, os.getpid() + 5):  # the predictable name of before
        (folder / f".SKILL.md.{pid}.tmp").symlink_to(victim)
    assert _install(capsys) == (0, f"installed: {folder / 'SKILL.md'}\n")
    assert victim.read_text() == "precious\n"
    assert (folder / "SKILL.md").read_text() == SKILL.read_text()
    assert not (folder / "SKILL.md").is_symlink()


@pytest.mark.parametrize("linked", [".claude", ".claude/skills", ".claude/skills/memlens"])
def test_a_linked_skill_folder_is_refused(
    project: Path, tmp_path: Path, linked: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other-skill"
    other.mkdir()
    (other / "SKILL.md").write_text("another skill\n")
    link = project / linked
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(other)
    code, out = _install(capsys)
    assert code == 2
    assert out == (
        f"memlens: error: {link} is a symbolic link or not a folder: not writing through it\n"
    )
    assert [p.name for p in other.iterdir()] == ["SKILL.md"]
    assert (other / "SKILL.md").read_text() == "another skill\n"


def test_a_link_at_the_skill_name_is_replaced_not_written_through(
    folder: Path, victim: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "SKILL.md").symlink_to(victim)
    assert _install(capsys) == (0, f"updated: {folder / 'SKILL.md'}\n")
    assert victim.read_text() == "precious\n"
    assert not (folder / "SKILL.md").is_symlink()
    assert (folder / "SKILL.md").read_text() == SKILL.read_text()
    assert sorted(p.name for p in folder.iterdir()) == ["SKILL.md"]  # no temporary left

"""Changelog fragments (changelog.d/) are well named and assemble into Keep a Changelog
sections; the assembly script is what a release runs (issue 24: a changelog that cannot
drift)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parent.parent


def _changelog_module() -> ModuleType:
    return load_script("changelog")


def test_every_fragment_is_named_and_is_one_bullet() -> None:
    changelog = _changelog_module()
    for _kind, path in changelog.fragments():
        body = path.read_text().strip()
        assert body.startswith("- "), f"{path.name}: a fragment is one Markdown bullet"


def test_release_moves_fragments_under_their_sections(tmp_path: Path, monkeypatch) -> None:
    changelog = _changelog_module()
    frag = tmp_path / "changelog.d"
    frag.mkdir()
    (frag / "README.md").write_text("rules")
    (frag / "7-b.fixed.md").write_text("- **B** fixed\n")
    (frag / "7-a.added.md").write_text("- **A** added\n")
    log = tmp_path / "CHANGELOG.md"
    log.write_text("# Changelog\n\n## [Unreleased]\n\n## [0.1.0]\n- old\n")
    monkeypatch.setattr(changelog, "FRAGMENTS", frag)
    monkeypatch.setattr(changelog, "CHANGELOG", log)
    assert changelog.entry() == "### Added\n- **A** added\n\n### Fixed\n- **B** fixed"
    assert changelog.main(["--release", "0.2.0"]) == 0
    text = log.read_text()
    assert text.index("## [0.2.0]") < text.index("### Added") < text.index("### Fixed")
    assert text.index("### Fixed") < text.index("## [0.1.0]")
    assert sorted(p.name for p in frag.iterdir()) == ["README.md"]


def test_badly_named_fragment_is_refused(tmp_path: Path, monkeypatch) -> None:
    changelog = _changelog_module()
    (tmp_path / "oops.md").write_text("- x")
    monkeypatch.setattr(changelog, "FRAGMENTS", tmp_path)
    with pytest.raises(SystemExit, match="name must be"):
        changelog.fragments()

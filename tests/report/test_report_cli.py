"""`memlens report` as a user runs it: output path, options, errors (exit 2, one line)."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner
from report_snapshots import step_snapshot, write

from memlens.cli.main import cli


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def main(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memlens", *args], capture_output=True, text=True, timeout=120
    )


def test_default_output_in_the_current_folder_not_beside_a_read_only_snapshot(
    tmp_path, monkeypatch
):
    """The snapshot may sit in someone else's or a read-only folder: the report goes to the
    current folder, as every other tool writes its output."""
    shelf, here = tmp_path / "shelf", tmp_path / "here"
    shelf.mkdir()
    here.mkdir()
    snap = write(step_snapshot(), shelf / "step.pickle.gz")
    shelf.chmod(0o555)
    monkeypatch.chdir(here)
    try:
        r = run("report", str(snap))
    finally:
        shelf.chmod(0o755)
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in shelf.iterdir()) == ["step.pickle.gz"]
    assert "wrote step.html (" in r.output
    assert "<!DOCTYPE html>" in (here / "step.html").read_text()


def test_html_option_names_the_file(tmp_path):
    snap = write(step_snapshot(), tmp_path / "step.pickle")
    r = run("report", str(snap), "--html", str(tmp_path / "out.html"))
    assert r.exit_code == 0, r.output
    assert "<!DOCTYPE html>" in (tmp_path / "out.html").read_text()


def test_output_option_and_two_snapshots(tmp_path):
    a = write(step_snapshot(evil=False), tmp_path / "a.pickle")
    b = write(step_snapshot(evil=False, scale=2), tmp_path / "b.pickle")
    r = run("report", str(a), str(b), "-o", str(tmp_path / "d.html"), "--hide", "", "--no-cache")
    assert r.exit_code == 0, r.output
    text = (tmp_path / "d.html").read_text()
    assert "a.pickle vs b.pickle" in text


def test_user_errors_exit_2_with_one_line(tmp_path):
    snap = write(step_snapshot(), tmp_path / "step.pickle")
    for args, message in [
        (["report", str(snap), "--device", "7"], "device 7 is not in this snapshot"),
        (["report", str(snap), "--rules", str(tmp_path / "missing.yaml")], "rules file not found"),
        (["report", str(snap), "-o", str(snap)], "refusing to overwrite the snapshot"),
        (["report", str(tmp_path / "nope.pickle")], "nope.pickle"),
        (["report", str(snap), "-o", str(tmp_path / "no" / "dir" / "r.html")], "cannot write"),
    ]:
        p = main(*args)
        assert p.returncode == 2, (args, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memlens: error:") and message in lines[0], (
            p.stderr
        )
    assert snap.read_bytes()[:1] == b"\x80"  # still the pickle


def test_failed_section_is_a_warning_not_an_error(tmp_path, monkeypatch):
    from memlens.views.report import build

    def boom(ctx):
        raise RuntimeError("kaboom")

    leaks = next(s for s in build.sections() if s.id == "leaks")
    monkeypatch.setattr(leaks, "fn", boom)
    snap = write(step_snapshot(), tmp_path / "step.pickle")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["report", str(snap)], catch_exceptions=False)
    assert r.exit_code == 0
    assert "memlens: warning: report section Leaks and growth: RuntimeError: kaboom" in r.output
    assert "this section failed (RuntimeError: kaboom)" in (tmp_path / "step.html").read_text()

"""tests/reader_choice.py, the plugin that picks CI's second pass: on a small suite run
inline, the tests that reach the reader choice (directly, through a shared fixture, at
import, through a child process) are listed, the others are not, and `--reader-tests`
runs just the listed ones."""

from __future__ import annotations

import textwrap

import pytest

pytest_plugins = ["pytester"]

SUITE = {
    "test_direct.py": """
        from memlens.snapshot.native import native_replay
        from memlens.snapshot.read import compiled

        def test_reader():
            compiled.mode()

        def test_replay():
            native_replay()

        def test_nothing():
            assert 1 + 1 == 2

        def test_sets_its_own(monkeypatch):
            monkeypatch.setenv("MEMLENS_READER", "python")
            compiled.mode()
            native_replay()
    """,
    "test_shared.py": """
        import pytest
        from memlens.snapshot.read import compiled

        @pytest.fixture(scope="module")
        def snap():
            return compiled.mode()

        @pytest.fixture
        def built_on(snap):
            return snap

        def test_first(snap):
            pass

        def test_second(built_on):
            pass

        def test_other():
            pass
    """,
    "test_at_import.py": """
        from memlens.snapshot.read import compiled

        MODE = compiled.mode()

        def test_uses_it():
            assert MODE == "auto"
    """,
    "test_children.py": """
        import os
        import subprocess
        import sys

        def test_inherits():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        def test_own_environment():
            env = {k: v for k, v in os.environ.items() if k != "MEMLENS_READER"}
            subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)

        def test_not_memlens():
            subprocess.run(["git", "--version"], capture_output=True, check=True)
    """,
}


def test_records_the_tests_that_reach_the_choice(pytester, monkeypatch):
    monkeypatch.delenv("MEMLENS_READER", raising=False)  # the recording pass sets `auto`
    pytester.makepyfile(**{name[:-3]: textwrap.dedent(body) for name, body in SUITE.items()})
    out = pytester.path / "reader-tests.txt"
    result = pytester.runpytest("-p", "reader_choice", f"--record-reader-tests={out}")
    result.assert_outcomes(passed=11)
    assert out.read_text().splitlines() == [
        "test_at_import.py::test_uses_it",
        "test_children.py::test_inherits",
        "test_direct.py::test_reader",
        "test_direct.py::test_replay",
        "test_shared.py::test_first",
        "test_shared.py::test_second",
    ]
    assert not (pytester.path / "reader-tests.txt.parts").exists()

    again = pytester.runpytest("-p", "reader_choice", f"--reader-tests={out}")
    again.assert_outcomes(passed=6, deselected=5)


def test_a_listed_test_no_longer_collected_is_an_error(pytester):
    pytester.makepyfile(test_one="def test_a():\n    pass\n")
    listed = pytester.path / "listed.txt"
    listed.write_text("test_one.py::test_a\ntest_one.py::test_gone\n")
    result = pytester.runpytest("-p", "reader_choice", f"--reader-tests={listed}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*1 listed tests were not collected, e.g. test_one.py::test_gone"])

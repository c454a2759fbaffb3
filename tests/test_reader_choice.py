"""tests/reader_choice.py, the plugin that picks CI's second pass: on a small suite run
inline, the tests that reach the reader choice (directly, through a shared fixture, at
import, through a child process) are listed, the others are not (a test that sets the
reader itself, `auto` included; one using a fixture that only shares a name with one
that asked), and `--reader-tests` runs just the listed ones, from their files only,
longest file first."""

from __future__ import annotations

import json
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

        def test_sets_the_default(monkeypatch):
            monkeypatch.setenv("MEMLENS_READER", "auto")
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
    # run after test_shared.py: its `snap` has asked by then
    "test_uses_the_name.py": """
        import pytest

        @pytest.fixture
        def snap():
            return "built by hand"

        def test_same_name_other_fixture(snap):
            assert snap == "built by hand"
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
    # the recording pass sets its own value (reader_choice.RECORDING)
    monkeypatch.delenv("MEMLENS_READER", raising=False)
    pytester.makepyfile(**{name[:-3]: textwrap.dedent(body) for name, body in SUITE.items()})
    out = pytester.path / "reader-tests.txt"
    result = pytester.runpytest("-p", "reader_choice", f"--record-reader-tests={out}")
    result.assert_outcomes(passed=13)
    assert out.read_text().splitlines() == [
        "test_at_import.py::test_uses_it",
        "test_children.py::test_inherits",
        "test_direct.py::test_reader",
        "test_direct.py::test_replay",
        "test_shared.py::test_first",
        "test_shared.py::test_second",
    ]
    assert not (pytester.path / "reader-tests.txt.parts").exists()
    seconds = json.loads((pytester.path / "reader-tests.txt.seconds").read_text())
    assert sorted(seconds) == sorted(SUITE)
    assert all(isinstance(s, float) and s >= 0 for s in seconds.values())

    # test_uses_the_name.py has no listed test: it is not collected, so not deselected
    again = pytester.runpytest("-p", "reader_choice", f"--reader-tests={out}")
    again.assert_outcomes(passed=6, deselected=6)


def test_the_listed_files_run_longest_first(pytester):
    pytester.makepyfile(
        test_a="def test_one():\n    pass\n\ndef test_two():\n    pass\n",
        test_b="def test_one():\n    pass\n",
        test_c="def test_one():\n    pass\n",
    )
    listed = pytester.path / "listed.txt"
    listed.write_text("test_a.py::test_one\ntest_a.py::test_two\ntest_b.py::test_one\n")
    (pytester.path / "listed.txt.seconds").write_text(
        json.dumps({"test_a.py": 1.5, "test_b.py": 40.0, "test_c.py": 99.0})
    )
    result = pytester.runpytest("-p", "reader_choice", f"--reader-tests={listed}", "-v")
    result.assert_outcomes(passed=3)
    ran = [line.split()[0] for line in result.outlines if " PASSED" in line]
    assert ran == ["test_b.py::test_one", "test_a.py::test_one", "test_a.py::test_two"]


def test_a_listed_test_no_longer_collected_is_an_error(pytester):
    pytester.makepyfile(test_one="def test_a():\n    pass\n")
    listed = pytester.path / "listed.txt"
    listed.write_text("test_one.py::test_a\ntest_one.py::test_gone\n")
    result = pytester.runpytest("-p", "reader_choice", f"--reader-tests={listed}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*1 listed tests were not collected, e.g. test_one.py::test_gone"])


def test_a_test_that_leaves_the_reader_changed_fails(pytester, monkeypatch):
    monkeypatch.setenv("MEMLENS_READER", "python")  # as in CI's second pass
    pytester.makepyfile(
        test_leaks="""
        import os

        def test_leaves_it():
            os.environ.pop("MEMLENS_READER")

        def test_after():
            assert os.environ["MEMLENS_READER"] == "python"
        """
    )
    result = pytester.runpytest("-p", "reader_choice")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*the test left MEMLENS_READER=None (it was 'python'): put it back"]
    )

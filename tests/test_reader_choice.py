"""tests/reader_choice.py: a test that leaves MEMLENS_READER changed fails, and the tests
after it in that worker get the run's reader back."""

from __future__ import annotations

pytest_plugins = ["pytester"]


def test_a_test_that_leaves_the_reader_changed_fails(pytester, monkeypatch):
    monkeypatch.setenv("MEMLENS_READER", "python")
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

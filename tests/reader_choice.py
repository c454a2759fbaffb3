"""The reader choice (MEMLENS_READER) stays what the run asked for, test after test.

The README's test command runs the suite with MEMLENS_READER=both: every snapshot a test
reads is built on the compiled path and on the Python path and compared
(memlens.snapshot.reader_agreement). Tests that pick a reader themselves set the variable
with monkeypatch; one that changed it and left it changed would switch the tests after it
in that worker to another reader without a word.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

READER_ENV = "MEMLENS_READER"


@pytest.fixture(autouse=True)
def _reader_choice_kept() -> Generator[None]:
    """A test that changes MEMLENS_READER must put it back: the tests after it in the same
    worker would run on another reader than the run asked for."""
    before = os.environ.get(READER_ENV)
    yield
    after = os.environ.get(READER_ENV)
    if after != before:
        if before is None:
            os.environ.pop(READER_ENV, None)
        else:
            os.environ[READER_ENV] = before
        pytest.fail(f"the test left {READER_ENV}={after!r} (it was {before!r}): put it back")

"""Arguments that used to reach the last-resort "unexpected ... please report it" line
(issue 33) are foreseen: one `memlens: error:` line, exit 2."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from memlens.cli.main import run


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert run(list(argv)) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "unexpected" not in err
    return err


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf"])
def test_a_float_option_refuses_nan_and_infinities(
    capsys: pytest.CaptureFixture[str], hand_file: Path, value: str
) -> None:
    assert _error(capsys, "fleet", "--z", value, str(hand_file)) == (
        f"memlens: error: --z: {value!r} is not a finite number\n"
    )
    assert _error(capsys, "peak", "--min-share", value, str(hand_file)) == (
        f"memlens: error: --min-share: {value!r} is not a finite number\n"
    )


def test_a_nul_in_a_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(capsys, "summary", "a\0b") == "memlens: error: a?b: a path cannot contain NUL\n"


def test_a_million_character_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(capsys, "peak", "x" * 1_000_000) == (
        f"memlens: error: {'x' * 300}… (1,000,000 characters): the path is longer than the "
        "system allows\n"
    )
    long_name = "y" * 300  # one name over NAME_MAX, the path itself short
    assert _error(capsys, "summary", long_name).endswith(
        ": the path is longer than the system allows\n"
    )


@pytest.mark.skipif(sys.platform != "linux", reason="Linux's special files")
@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/proc/self/mem", "a kernel file under /proc"),
        ("/dev/zero", "a kernel file under /dev"),
        ("/sys/kernel/mm/transparent_hugepage/enabled", "a kernel file under /sys"),
    ],
)
def test_special_files(capsys: pytest.CaptureFixture[str], path: str, said: str) -> None:
    if not os.path.exists(path):
        pytest.skip(f"{path} is not on this system")
    assert _error(capsys, "summary", path) == (
        f"memlens: error: {path}: not a regular file ({said})\n"
    )


def test_a_pipe_is_not_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.pickle"
    os.mkfifo(fifo)  # opening it to read would block until a writer comes
    # if a reader ever opens it again, this writer unblocks it: the test fails, not hangs
    unblock = threading.Timer(10, lambda: open(fifo, "wb").close())
    unblock.daemon = True
    unblock.start()
    assert _error(capsys, "summary", str(fifo)) == (
        f"memlens: error: {fifo}: not a regular file (a device, pipe or socket)\n"
    )
    assert _error(capsys, "fleet", str(fifo)) == (
        f"memlens: error: {fifo}: not a regular file (a device, pipe or socket)\n"
    )
    unblock.cancel()

"""On a core install (no extras), the commands that need one name it, as one line and exit
2, before reading any snapshot: the viewer's web server, the TUI's Textual."""

from __future__ import annotations

import sys

import pytest

from memlens.cli.main import run


@pytest.mark.parametrize(
    "command, module, message",
    [
        ("view", "uvicorn", "memlens: error: memlens view needs its web server (uvicorn is "
         "not installed): pip install 'memlens[web]'"),
        ("view", "starlette", "memlens: error: memlens view needs its web server (starlette "
         "is not installed): pip install 'memlens[web]'"),
        ("tui", "textual", "memlens: error: memlens tui needs Textual (textual is not "
         "installed): pip install 'memlens[tui]'"),
    ],
)  # fmt: skip
def test_a_missing_extra_is_named(command, module, message, monkeypatch, capsys, hand_file):
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    assert run([command, str(hand_file), "--no-browser"][: 3 if command == "view" else 2]) == 2
    assert capsys.readouterr().err.strip() == message

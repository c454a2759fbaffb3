"""The CLI's last line of defence and its text output (issue 16, points 1, 2 and 4): an
unexpected exception is one line and exit 2 (--debug: the traceback), a limit names the
option that raises it and the option works, control characters from names never reach the
terminal raw."""

from __future__ import annotations

import pickle

import pytest
from corpus import _shared_blocks, hostile_text

from memlens.cli.main import main, run
from memlens.snapshot.assemble import builder


@pytest.fixture
def snap_path(tmp_path):
    from corpus import base_snapshot

    p = tmp_path / "s.pickle"
    p.write_bytes(pickle.dumps(base_snapshot(), protocol=4))
    return p


def test_unexpected_exception_is_one_line_exit_2(snap_path, monkeypatch, capsys):
    def boom(*a, **k):
        raise ValueError("something nobody foresaw")

    monkeypatch.setattr(builder, "_build_snapshot", boom)  # both readers build through it
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    monkeypatch.delenv("MEMLENS_DEBUG", raising=False)
    assert run(["summary", str(snap_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "unexpected ValueError: something nobody foresaw" in err and "--debug" in err


def test_debug_shows_the_traceback(snap_path, monkeypatch, capsys):
    def boom(*a, **k):
        raise ValueError("something nobody foresaw")

    monkeypatch.setattr(builder, "_build_snapshot", boom)  # both readers build through it
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    monkeypatch.setenv("MEMLENS_DEBUG", "")  # restored after the test (--debug sets it)
    assert run(["--debug", "summary", str(snap_path)]) == 2
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_limit_error_names_the_option_and_the_option_raises_it(tmp_path, monkeypatch, capsys):
    p = tmp_path / "shared.pickle"
    p.write_bytes(pickle.dumps(_shared_blocks(100, 2000), protocol=4))  # 1.2M values walked
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    monkeypatch.setenv("MEMLENS_MAX_ITEMS", "")  # restored after the test (--limit sets it)
    assert run(["summary", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "the 'items' limit" in err and "--limit items=" in err and "MEMLENS_MAX_ITEMS=" in err
    assert run(["--limit", "items=20000000", "summary", str(p)]) == 0
    monkeypatch.setenv("MEMLENS_MAX_ITEMS", "0")  # 0: no limit
    assert run(["summary", str(p)]) == 0


def test_bad_limit_option_is_a_usage_error(snap_path, capsys):
    assert run(["--limit", "bogus=1", "summary", str(snap_path)]) == 2
    assert "items, memo, depth" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["summary", "peak", "stages", "leaks", "categories"])
def test_control_characters_are_shown_as_escapes(tmp_path, monkeypatch, capsys, command):
    name, data = next((n, d) for n, d in hostile_text() if n == "text-esc.pickle")
    p = tmp_path / name
    p.write_bytes(data)
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    try:
        main([command, str(p)])
    except SystemExit as exc:
        assert exc.code in (0, 2, None)
    out = capsys.readouterr()
    for stream in (out.out, out.err):
        assert "\x1b" not in stream and "\x07" not in stream and "\r" not in stream
    if command in ("summary", "peak"):
        assert "\\x1b" in out.out  # shown, visibly


def test_status_lines_show_control_characters_in_file_names(tmp_path, monkeypatch, capsys):
    """The lines a command prints besides its analysis ("wrote X", "serving X") name files
    the user or a snapshot chose: they go through cli.options.status like the analyses."""
    monkeypatch.setenv("MEMLENS_NO_CACHE", "1")
    snap = tmp_path / "s\x1b]0;t\x07.pickle"
    assert run(["generate", str(snap), "--events", "200"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path}/s\\x1b]0;t\\x07.pickle: 1 device(s), ")
    html = tmp_path / "r\x1b[2J.html"
    assert run(["report", str(snap), "-o", str(html)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {tmp_path}/r\\x1b[2J.html (") and out.endswith(" s)\n")
    assert "\x1b" not in out and "\x07" not in out
    assert html.is_file()

"""`memlens view` on the command line: arguments, errors, the URL it prints."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import httpx
import pytest
from click.testing import CliRunner
from view_fixtures import small_snapshot

from memlens.cli.main import cli, main
from memlens.errors import MemlensError
from memlens.simulation.synthetic import generate_snapshot
from memlens.views.web.address import bind_socket, url_for


def test_help_lists_the_options():
    r = CliRunner().invoke(cli, ["view", "--help"])
    assert r.exit_code == 0
    for opt in ("--port", "--host", "--no-browser", "--device", "--no-cache"):
        assert opt in r.output


def test_three_snapshots_is_a_user_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["view", "a", "b", "c", "--no-browser"])
    assert exc.value.code == 2
    assert "one snapshot, or two" in capsys.readouterr().err


def test_unknown_device_is_a_user_error(tmp_path, capsys):
    import pickle

    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(small_snapshot()))
    with pytest.raises(SystemExit) as exc:
        main(["view", str(path), "--device", "5", "--no-browser"])
    assert exc.value.code == 2
    assert "device 5" in capsys.readouterr().err


def test_port_in_use_is_a_user_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        with pytest.raises(MemlensError, match="cannot listen"):
            bind_socket("127.0.0.1", s.getsockname()[1])


def test_url_for():
    assert url_for("127.0.0.1", 8765, None) == "http://127.0.0.1:8765/"
    assert url_for("0.0.0.0", 80, 1) == "http://127.0.0.1:80/?device=1"
    assert url_for("::1", 9, None) == "http://[::1]:9/"


def test_serves_and_prints_the_url(tmp_path):
    path = tmp_path / "g.pickle"
    generate_snapshot(path, events=2000)
    proc = subprocess.Popen(
        [sys.executable, "-m", "memlens", "view", str(path), "--no-browser", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "memlens view: serving" in line and "http://127.0.0.1:" in line
        url = line.split(" at ", 1)[1].split()[0]
        deadline = time.monotonic() + 20
        while True:
            try:
                r = httpx.get(url + "api/meta", timeout=5)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert r.status_code == 200
        assert r.json()["snapshots"][0]["devices"][0]["n_events"] > 0
        assert httpx.get(url).text.startswith("<!doctype html>")
    finally:
        proc.terminate()
        proc.wait(10)

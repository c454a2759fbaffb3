"""`memlens view` serves while its snapshots load (issue 37): the URL is printed and the page
served before the load ends, the API's requests wait for it and then answer as after it, a
load that fails is one error line and exit 2, and a Ctrl+C during it stops cleanly.

The load is held at its start by a gate in a subprocess (GATED below): it goes on once the
test writes a line to the command's stdin, so "during the load" is not a race."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from view_fixtures import small_snapshot

from memlens.errors import MemlensError, SnapshotError
from memlens.views.web.loading import Loading

pytest.importorskip("uvicorn")

# `memlens view`, its load held until a line comes on stdin; FAIL=1: the load then raises
# the reader's own error for a file that is not a snapshot
GATED = """
import os, sys
import memlens.cli.options as options
from memlens.errors import SnapshotError

real = options.open_snapshots

def gated(*args, **kwargs):
    sys.stdin.readline()
    if os.environ.get("FAIL") == "1":
        raise SnapshotError(f"{args[0][0]} holds a str, not a memory snapshot")
    return real(*args, **kwargs)

options.open_snapshots = gated  # before the view command's modules import it
from memlens.cli.main import main
main(["view", *sys.argv[1:], "--no-browser", "--port", "0"])
"""
VIEW = "api/d/0/view?e0=0&e1=8&width=900&height=300"


@pytest.fixture
def snapshot_file(tmp_path: Path) -> Path:
    path = tmp_path / "small.pickle"
    path.write_bytes(pickle.dumps(small_snapshot()))
    return path


def start_gated(path: Path, fail: bool = False) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", GATED, str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, FAIL="1" if fail else "0"),
    )  # fmt: skip
    stdout = proc.stdout
    assert stdout is not None
    lines: list[str] = []  # the URL, printed while the load waits at its gate
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(60)  # (a command that prints it after the load never does: a failure)
    if not lines:
        proc.kill()
        pytest.fail("no URL while the load waits")
    assert "memlens view: serving" in lines[0], proc.communicate(timeout=30)
    return proc, lines[0].split(" at ", 1)[1].split()[0]


def release(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.flush()


def get_in_background(url: str) -> tuple[threading.Thread, list[httpx.Response]]:
    got: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: got.append(httpx.get(url, timeout=60)))
    thread.start()
    return thread, got


def test_the_page_is_served_and_the_api_waits_for_the_load(snapshot_file: Path) -> None:
    proc, url = start_gated(snapshot_file)
    try:
        # the page at once, without /api/meta's answer written in (not known yet): it
        # preloads /api/meta instead
        page = httpx.get(url, timeout=30)
        assert page.status_code == 200
        assert '<link rel="preload" href="/api/meta"' in page.text
        assert 'id="meta"' not in page.text
        assert httpx.get(url + "static/bundle.js", timeout=30).status_code == 200
        meta_thread, meta = get_in_background(url + "api/meta")
        view_thread, view = get_in_background(url + VIEW)
        meta_thread.join(1.0)
        assert meta_thread.is_alive() and not meta  # waiting for the load
        release(proc)
        meta_thread.join(60)
        view_thread.join(60)
        # the same bytes as the answers asked for after the load
        assert meta[0].status_code == 200 and view[0].status_code == 200
        assert meta[0].content == httpx.get(url + "api/meta", timeout=30).content
        assert view[0].content == httpx.get(url + VIEW, timeout=30).content
        assert meta[0].json()["snapshots"][0]["name"] == str(snapshot_file)
        # once loaded, the page has /api/meta's answer written in, as before
        assert 'id="meta"' in httpx.get(url, timeout=30).text
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def test_a_load_that_fails_is_one_error_line_and_exit_2(snapshot_file: Path) -> None:
    proc, url = start_gated(snapshot_file, fail=True)
    meta_thread, meta = get_in_background(url + "api/meta")
    meta_thread.join(1.0)
    assert meta_thread.is_alive()  # in the server, waiting for the load
    release(proc)
    meta_thread.join(60)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err == f"memlens: error: {snapshot_file} holds a str, not a memory snapshot\n"
    # the request made during the load: a clean answer, not a traceback
    assert meta[0].status_code == 400
    assert meta[0].json() == {
        "error": "the snapshot could not be opened: "
        f"{snapshot_file} holds a str, not a memory snapshot"
    }


def test_a_file_the_load_refuses_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "str.pickle"
    path.write_bytes(pickle.dumps("a string"))  # a pickle: past the checks made before the URL
    out = subprocess.run(
        [sys.executable, "-m", "memlens", "view", str(path), "--no-browser", "--port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert "memlens view: serving" in out.stdout
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("memlens: error: ")
    assert "not a memory snapshot" in out.stderr


@pytest.mark.parametrize(
    ("content", "said"),
    [(None, "no such file"), (b"time,bytes\n1,2\n", "is not a pickle"), (b"", "is empty")],
)
def test_what_the_first_bytes_tell_is_said_before_the_url(
    tmp_path: Path, content: bytes | None, said: str
) -> None:
    path = tmp_path / "bad.pickle"
    if content is not None:
        path.write_bytes(content)
    out = subprocess.run(
        [sys.executable, "-m", "memlens", "view", str(path), "--no-browser", "--port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("memlens: error: ")
    assert said in out.stderr


def test_an_unknown_device_is_found_after_the_load(snapshot_file: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "memlens", "view", str(snapshot_file), "--no-browser",
         "--port", "0", "--device", "5"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("memlens: error: ")
    assert "device 5" in out.stderr


def test_ctrl_c_during_the_load_stops_cleanly(snapshot_file: Path) -> None:
    proc, _ = start_gated(snapshot_file)
    proc.send_signal(signal.SIGINT)
    release(proc)  # (the gate stands for the reader, which no signal interrupts)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err
    assert proc.returncode != 0


def test_loading_waits_then_says_why_it_failed() -> None:
    loading = Loading()
    assert not loading.loaded()
    loading.future.set_exception(SnapshotError("x.pickle is empty (0 bytes)"))
    assert not loading.loaded()
    for _ in range(2):  # a new exception each time
        with pytest.raises(MemlensError) as exc:
            loading.wait()
        assert str(exc.value) == "the snapshot could not be opened: x.pickle is empty (0 bytes)"
    bug = Loading()
    bug.future.set_exception(KeyError("x"))
    with pytest.raises(
        MemlensError, match=r"^the snapshot could not be opened \(internal error KeyError\)$"
    ):
        bug.wait()

"""Ctrl-C, exceptions and a killed parent: no process left behind, no broken file.

Each case runs a real training loop in a subprocess (a script with no ``__main__`` guard,
so a spawn child that re-ran it would show)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from inspect_helpers import check_html, check_run_files, decode_video  # noqa: E402

from memlens.inspector.store import Run, load_run  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
SRC = HERE.parents[1] / "src"

SCRIPT = textwrap.dedent(
    """
    import sys, time
    import torch
    import memlens
    from inspect_helpers import TinyCNN, batch_for, train_step

    MODE, OUT = sys.argv[1], sys.argv[2]
    print("SCRIPT-START", flush=True)  # printed twice if the spawn child re-ran this file
    torch.manual_seed(0)
    model = TinyCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ins = memlens.inspect(model, layers=["conv2", "bn2"], every=2, out=OUT, close_timeout=90)
    print("WORKER", ins._transport.proc.pid, flush=True)

    def loop():
        step = 0
        while True:
            train_step(model, opt, batch_for(model))
            ins.step()
            step += 1
            print("STEP", step, flush=True)
            if MODE.startswith("exception") and step == 8:
                raise ValueError("boom")
            time.sleep(0.01)

    if MODE.endswith("with"):
        with ins:
            loop()
    else:
        loop()
    """
)


def session_processes(sid: int) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, session = fields[0], int(fields[3])
        if session == sid and state != "Z":
            pids.append(int(d.name))
    return pids


def start(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(HERE), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, str(script), mode, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group: a Ctrl-C to it reaches only it
    )
    return proc, out


def wait_for_step(proc: subprocess.Popen[str], n: int, lines: list[str]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip() == f"STEP {n}":
            return
    pytest.fail(f"the training script did not reach step {n}: {''.join(lines)}")


def finish(proc: subprocess.Popen[str], lines: list[str], timeout: float = 150) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the training script hung on exit: {err}")
    return "".join(lines) + out, err


def assert_no_orphans(sid: int) -> None:
    deadline = time.monotonic() + 10
    while session_processes(sid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert session_processes(sid) == [], "a process of the training run outlived it"


def assert_complete_outputs(out: Path, *, status: str, videos: bool = True) -> None:
    check_run_files(out)
    run = load_run(out)
    assert run.meta["status"] == status
    assert run.tensors, "no samples were saved"
    for s in run.tensors.values():
        assert len(s) >= 2
    check_html((out / "dashboard.html").read_text())
    if videos:
        found = sorted((out / "videos").iterdir())
        assert len(found) == len(run.tensors)
        for v in found:
            frames = decode_video(v)
            assert len(frames) == len(run.tensors[_key_of(run, v)])


def _key_of(run: Run, video: Path) -> str:
    name = video.name.rsplit(".", 1)[0]
    return next(k for k, s in run.tensors.items() if s.dir.name == name)


@pytest.mark.parametrize("mode", ["plain", "with"])
def test_ctrl_c(tmp_path, mode):
    proc, out = start(tmp_path, f"sigint-{mode}")
    lines: list[str] = []
    wait_for_step(proc, 6, lines)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    stdout, stderr = finish(proc, lines)
    assert proc.returncode != 0 and "KeyboardInterrupt" in stderr
    assert stdout.count("SCRIPT-START") == 1
    assert "samples sent" in stderr
    assert_no_orphans(proc.pid)
    assert_complete_outputs(out, status="interrupted")


@pytest.mark.parametrize("mode", ["plain", "with"])
def test_exception(tmp_path, mode):
    proc, out = start(tmp_path, f"exception-{mode}")
    stdout, stderr = finish(proc, [])
    assert proc.returncode == 1 and "ValueError: boom" in stderr
    assert stdout.count("SCRIPT-START") == 1
    assert_no_orphans(proc.pid)
    assert_complete_outputs(out, status="error")


def test_killed_parent(tmp_path):
    """SIGKILL leaves no chance to clean up: the worker notices, saves, and exits by itself."""
    proc, out = start(tmp_path, "kill")
    lines: list[str] = []
    wait_for_step(proc, 6, lines)
    os.kill(proc.pid, signal.SIGKILL)
    finish(proc, lines)
    assert_no_orphans(proc.pid)
    check_run_files(out)
    run = load_run(out)
    assert run.meta["status"] == "interrupted"
    assert run.meta["end_reason"] == "parent process died"
    check_html((out / "dashboard.html").read_text())


def test_meta_of_interrupted_run_is_valid_json(tmp_path):
    proc, out = start(tmp_path, "sigint-plain")
    lines: list[str] = []
    wait_for_step(proc, 4, lines)
    os.killpg(proc.pid, signal.SIGINT)
    finish(proc, lines)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["last_step"] >= 3 and meta["samples_sent"] == meta["samples_written"]


def test_ctrl_c_while_the_worker_is_still_starting(tmp_path):
    """A Ctrl-C that reaches the process group while the background process is still
    importing must not kill it: it finishes the run's files like any other."""
    proc, out = start(tmp_path, "sigint-plain")
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        lines.append(line)
        if not line or line.startswith("WORKER"):
            break
    os.killpg(proc.pid, signal.SIGINT)
    finish(proc, lines)
    assert_no_orphans(proc.pid)
    check_run_files(out)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["status"] == "interrupted"
    assert "samples_written" in meta  # written by the background process, so it survived

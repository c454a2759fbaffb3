"""`memlens run`: the harness in process with the fake backend, and the command in a
subprocess (fake selected with MEMLENS_RECORD_BACKEND, and the real CPU-only torch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import record_fixtures
from record_fake_backend import FakeBackend, read_snapshot_file

from memlens.capture import backend as backend_mod
from memlens.capture.backend import RecordSettings
from memlens.capture.errors import RecordError
from memlens.capture.runner import RunOptions, run_script
from memlens.cli.main import main
from memlens.cli.run import _default_output, summary_text

_clean = pytest.fixture(autouse=True)(record_fixtures.clean_capture_state)
fake = pytest.fixture(record_fixtures.fake_backend)

HERE = Path(__file__).resolve().parent
START = ["start", 100_000, "python", "all"]

PROLOGUE = """\
import os, signal, sys
import memlens
from memlens.capture.backend import get_backend
fake = get_backend()
"""


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(PROLOGUE + textwrap.dedent(body))
    return path


def _run(script: Path, out: Path, args=(), **options):
    return run_script(script, list(args), RunOptions(output=out, **options))


def test_script_runs_as_main_with_its_argv_and_exit_code(fake, tmp_path, capsys):
    script = _script(
        tmp_path,
        """
        import record_run_sibling  # found beside the script, as with `python train.py`
        print(__name__, sys.argv[1:], sys.argv[0].endswith("train.py"), record_run_sibling.X)
        a = fake.alloc(1 << 20)
        fake.alloc(1 << 20)
        fake.free(a)
        sys.exit(3)
        """,
    )
    (tmp_path / "record_run_sibling.py").write_text("X = 42\n")
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    out = tmp_path / "out" / "run.pickle"
    result = _run(script, out, ["x", "--flag"])
    assert result.exit_code == 3
    assert capsys.readouterr().out == "__main__ ['x', '--flag'] True 42\n"
    assert (sys.argv, sys.path) == (saved_argv, saved_path)
    assert fake.named_calls() == ["start", "attach_oom_observer", "snapshot", "stop"]
    assert result.main_snapshot == out and result.snapshots == [out]
    actions = [e["action"] for e in read_snapshot_file(out)["device_traces"][0]]
    assert actions == ["segment_alloc", "alloc", "alloc", "free_requested", "free_completed"]


def test_script_traceback_starts_at_the_script(fake, tmp_path, capsys):
    script = _script(tmp_path, "def f():\n    raise ValueError('deep')\nf()\n")
    assert _run(script, tmp_path / "run.pickle").exit_code == 1
    err = capsys.readouterr().err
    assert "runpy" not in err and "runner.py" not in err
    assert f'File "{script}", line 7, in <module>' in err
    assert err.rstrip().endswith("ValueError: deep")


def test_the_main_snapshot_goes_to_the_callback(fake, tmp_path):
    script = _script(tmp_path, "fake.alloc(1 << 20)\n")
    seen = []

    def beside(path):
        seen.append(path)
        return path.with_suffix(".html")

    out = tmp_path / "run.pickle"
    result = _run(script, out, on_snapshot_written=beside)
    assert seen == [out] and result.report == tmp_path / "run.html"
    assert _run(script, out).report is None


def test_history_switched_off_by_the_script_is_said(fake, tmp_path, capsys):
    script = _script(
        tmp_path,
        """
        fake.alloc(1 << 20)
        fake.stop()  # the script's own torch.cuda.memory._record_memory_history(enabled=None)
        """,
    )
    out = tmp_path / "run.pickle"
    result = _run(script, out)
    assert result.exit_code == 0 and result.main_snapshot == out
    assert read_snapshot_file(out)["device_traces"] == [[]]
    assert capsys.readouterr().err == (
        f"memlens: {out}: CUDA memory history was switched off during the recording by code "
        "outside memlens (torch.cuda.memory._record_memory_history(enabled=None)), which "
        "also clears it: this snapshot has the allocator's segments but no trace\n"
    )


def test_default_output_name():
    assert _default_output("some/dir/train.py") == Path(f"memlens-train.{os.getpid()}.pickle")


@pytest.mark.parametrize(
    ("body", "code"),
    [("pass", 0), ("sys.exit()", 0), ("sys.exit('bad input')", 1), ("raise ValueError('x')", 1)],
)
def test_exit_codes(fake, tmp_path, body, code):
    result = _run(_script(tmp_path, body), tmp_path / "run.pickle")
    assert result.exit_code == code
    assert (tmp_path / "run.pickle").is_file()  # dumped however the script ended


def test_every_n_steps(fake, tmp_path):
    script = _script(
        tmp_path,
        """
        for i in range(5):
            fake.alloc(4096)
            memlens.step()
        """,
    )
    result = _run(script, tmp_path / "run.pickle", every_n_steps=2)
    names = [p.name for p in result.snapshots]
    assert names == ["run.step000002.pickle", "run.step000004.pickle", "run.pickle"]
    allocs = [
        sum(e["action"] == "alloc" for e in read_snapshot_file(tmp_path / n)["device_traces"][0])
        for n in names
    ]
    assert allocs == [2, 4, 5]


def test_sigusr1_dumps_and_handler_is_restored(fake, tmp_path):
    before = signal.getsignal(signal.SIGUSR1)
    script = _script(
        tmp_path,
        """
        fake.alloc(4096)
        os.kill(os.getpid(), signal.SIGUSR1)
        fake.alloc(4096)
        os.kill(os.getpid(), signal.SIGUSR1)
        """,
    )
    result = _run(script, tmp_path / "run.pickle")
    assert [p.name for p in result.snapshots] == [
        "run.sigusr1-1.pickle",
        "run.sigusr1-2.pickle",
        "run.pickle",
    ]
    assert len(read_snapshot_file(tmp_path / "run.sigusr1-1.pickle")["device_traces"][0]) == 2
    assert signal.getsignal(signal.SIGUSR1) == before


def test_oom_is_dumped_at_the_moment_it_happens(fake, tmp_path):
    script = _script(
        tmp_path,
        """
        a = fake.alloc(4096)
        try:
            fake.oom(1 << 40)
        finally:
            fake.free(a)
        """,
    )
    result = _run(script, tmp_path / "run.pickle")
    assert result.exit_code == 1
    assert result.oom_snapshot == tmp_path / "run.oom.pickle"
    at_oom = read_snapshot_file(tmp_path / "run.oom.pickle")
    assert at_oom["device_traces"][0][-1]["action"] == "oom"
    assert at_oom["segments"][0]["blocks"][0]["state"] == "active_allocated"
    at_exit = read_snapshot_file(tmp_path / "run.pickle")
    assert at_exit["segments"][0]["blocks"][0]["state"] == "inactive"
    assert result.main_snapshot == tmp_path / "run.pickle"


def test_on_oom_only_writes_nothing_without_an_oom(fake, tmp_path):
    result = _run(_script(tmp_path, "fake.alloc(4096)"), tmp_path / "run.pickle", on_oom_only=True)
    assert result.main_snapshot is None and result.snapshots == []
    assert list(tmp_path.glob("*.pickle")) == []
    assert fake.named_calls() == ["start", "attach_oom_observer", "stop"]


def test_on_oom_only_keeps_the_oom_snapshot(fake, tmp_path):
    result = _run(_script(tmp_path, "fake.oom(1 << 40)"), tmp_path / "run.pickle", on_oom_only=True)
    assert result.main_snapshot == tmp_path / "run.oom.pickle"
    assert [p.name for p in tmp_path.glob("*.pickle")] == ["run.oom.pickle"]


def test_on_oom_only_without_an_observer_fails_before_the_script_runs(tmp_path):
    fake = FakeBackend(oom_supported=False)
    backend_mod.set_backend(fake)
    script = _script(tmp_path, "open('ran', 'w')")
    with pytest.raises(RecordError, match="no out-of-memory observer"):
        _run(script, tmp_path / "run.pickle", on_oom_only=True)
    assert not (tmp_path / "ran").exists()
    assert fake.named_calls() == ["start", "attach_oom_observer", "stop"]


def test_without_an_observer_the_run_goes_on(tmp_path, capsys):
    backend_mod.set_backend(FakeBackend(oom_supported=False))
    result = _run(_script(tmp_path, "pass"), tmp_path / "run.pickle")
    assert result.main_snapshot == tmp_path / "run.pickle"
    assert "memlens: no snapshot at OOM: fake: no out-of-memory observer" in capsys.readouterr().err


def test_missing_script(fake, tmp_path):
    with pytest.raises(RecordError, match="no such script"):
        _run(tmp_path / "nope.py", tmp_path / "run.pickle")
    assert fake.calls == []


def test_settings_reach_the_backend(fake, tmp_path):
    settings = RecordSettings(max_entries=9, stacks="all")
    _run(_script(tmp_path, "pass"), tmp_path / "run.pickle", settings=settings)
    assert fake.calls[0] == ("start", 9, "all", "all")


def test_cli_on_oom_without_oom_says_so(fake, tmp_path, capsys):
    script = _script(tmp_path, "pass")
    with pytest.raises(SystemExit) as info:
        main(["run", "--on-oom", "--no-report", "-o", str(tmp_path / "r.pickle"), str(script)])
    assert info.value.code == 0
    assert (
        "memlens: no snapshot written (no out-of-memory error happened)" in capsys.readouterr().err
    )


def _memlens(
    args: list[str], cwd: Path, env_extra: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != backend_mod.BACKEND_ENV}
    env.update(env_extra)
    return subprocess.run(
        [sys.executable, "-m", "memlens", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_memlens_run_subprocess_with_fake_backend(tmp_path):
    _script(
        tmp_path,
        """
        print("args", sys.argv[1:])
        for i in range(4):
            fake.alloc(1 << 20)
            memlens.step()
        sys.exit(5)
        """,
    )
    log = tmp_path / "calls.jsonl"
    env = {
        backend_mod.BACKEND_ENV: "record_fake_backend:FakeBackend",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        "MEMLENS_FAKE_BACKEND_LOG": str(log),
    }
    args = ["run", "-o", "out/run.pickle", "--max-entries", "50", "--stacks", "all"]
    args += ["--every-n-steps", "2", "--no-report", "train.py", "a", "--b"]
    proc = _memlens(args, tmp_path, env)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == "args ['a', '--b']\n"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert calls == [
        ["start", 50, "all", "all"],
        ["attach_oom_observer"],
        ["snapshot"],
        ["snapshot"],
        ["snapshot"],
        ["stop"],
    ]
    assert "memlens: snapshot at step 2 written to out/run.step000002.pickle" in proc.stderr
    assert "memlens: snapshot written to out/run.pickle\n" in proc.stderr
    assert "memlens: other snapshots: out/run.step000002.pickle, out/run.step000004.pickle" in (
        proc.stderr
    )
    assert proc.stderr.rstrip().endswith("memlens: view it with: memlens view out/run.pickle")
    # the summary names the file as the command was given it (relative to the run's cwd)
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        summary = summary_text(Path("out") / "run.pickle")
    assert not summary.startswith("(no summary") and summary in proc.stderr
    snap = read_snapshot_file(tmp_path / "out" / "run.pickle")
    assert [e["size"] for e in snap["device_traces"][0] if e["action"] == "alloc"] == [1 << 20] * 4


def test_memlens_run_on_cpu_only_torch_is_a_clear_error(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    (tmp_path / "train.py").write_text("open('ran', 'w')\n")
    proc = _memlens(["run", "train.py"], tmp_path, {})
    assert proc.returncode == 2
    assert proc.stderr == (
        "memlens: error: CUDA is not available: recording a snapshot needs a GPU; "
        "use `memlens simulate` to predict the snapshot without one\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]

"""The harness behind `memlens run script.py`: run a script as `__main__` under recording.

Snapshots it writes, for `--output out/run.pickle`:
- `out/run.pickle` when the script ends (however it ends), unless `on_oom_only`;
- `out/run.oom.pickle` at the first CUDA out-of-memory error, taken inside the failing
  allocation (needs a CUDA build of torch);
- `out/run.step000010.pickle`, ... every N `memlens.step()` calls with `every_n_steps=N`;
- `out/run.sigusr1-1.pickle`, ... each time the process gets SIGUSR1 (`kill -USR1 PID`).
"""

from __future__ import annotations

import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memlens.capture import markers, oom, session
from memlens.capture.backend import Backend, RecordSettings, get_backend, require_available
from memlens.capture.errors import RecordError
from memlens.capture.output import SnapshotWritten, dump_snapshot, prepare_output, sibling_path


@dataclass(frozen=True)
class RunOptions:
    output: Path
    settings: RecordSettings = field(default_factory=RecordSettings)
    on_oom_only: bool = False
    every_n_steps: int | None = None
    # Called with the main snapshot at the end (`memlens run` passes the HTML report
    # writer); what it returns is `RunResult.report`.
    on_snapshot_written: SnapshotWritten | None = None


@dataclass
class RunResult:
    exit_code: int
    main_snapshot: Path | None = None
    report: Path | None = None
    snapshots: list[Path] = field(default_factory=list)
    oom_snapshot: Path | None = None


def _say(message: str) -> None:
    # memlens talks on stderr so the script's own stdout stays exactly the script's.
    print(f"memlens: {message}", file=sys.stderr, flush=True)


class _Harness:
    """What runs around the script: OOM observer, step hook, SIGUSR1 handler."""

    def __init__(self, backend: Backend, options: RunOptions) -> None:
        self.backend = backend
        self.options = options
        self.written: list[Path] = []
        self.dumper: oom.OomDumper | None = None
        self._remove_step_hook: Callable[[], None] | None = None
        self._old_sigusr1: Any = None
        self._signals = 0
        # Re-entrant: SIGUSR1's handler runs on the main thread, possibly in the middle of
        # a step dump that holds the lock.
        self._lock = threading.RLock()

    def dump(self, path: Path, why: str, *, announce: bool = True) -> Path | None:
        """Dump now; a failure is reported and the script goes on."""
        with self._lock:
            try:
                dump_snapshot(self.backend, path)
            except Exception as exc:
                _say(f"snapshot {why} not written: {exc}")
                return None
            self.written.append(path)
        if announce:
            _say(f"snapshot {why} written to {path}")
        return path

    def install(self) -> None:
        out = self.options.output
        self.dumper = oom.OomDumper(self.backend, lambda n: sibling_path(out, "oom"))
        try:
            oom.watch(self.dumper)
        except RecordError as exc:
            self.dumper = None
            if self.options.on_oom_only:
                raise
            _say(f"no snapshot at OOM: {exc}")
        if self.options.every_n_steps:
            self._remove_step_hook = markers.add_step_hook(self._on_step)
        if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
            self._old_sigusr1 = signal.signal(signal.SIGUSR1, self._on_sigusr1)

    def uninstall(self) -> None:
        if self._old_sigusr1 is not None:
            signal.signal(signal.SIGUSR1, self._old_sigusr1)
            self._old_sigusr1 = None
        if self._remove_step_hook is not None:
            self._remove_step_hook()
            self._remove_step_hook = None
        if self.dumper is not None:
            self.dumper.close()
            self.written.extend(self.dumper.paths)

    def _on_step(self, number: int) -> None:
        n = self.options.every_n_steps
        if n and number % n == 0:
            self.dump(sibling_path(self.options.output, f"step{number:06d}"), f"at step {number}")

    def _on_sigusr1(self, signum: int, frame: Any) -> None:
        self._signals += 1
        path = sibling_path(self.options.output, f"sigusr1-{self._signals}")
        self.dump(path, f"on SIGUSR1 #{self._signals}")


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what Python itself does with sys.exit("message")
    return 1


def _print_script_traceback(exc: BaseException, script: Path) -> None:
    """Print the traceback as `python script.py` would: from the script's frame down,
    without memlens's and runpy's frames above it."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != str(script):
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)


def _run_as_main(script: Path, args: list[str]) -> int:
    """Run the script the way `python script.py args` would; return its exit code."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args]
    # Python puts the script's folder first on the path, in place of memlens's own entry.
    sys.path[0] = str(script.resolve().parent)
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        return _exit_code(exc)
    except KeyboardInterrupt as exc:
        _print_script_traceback(exc, script)
        return 130
    except BaseException as exc:
        _print_script_traceback(exc, script)
        return 1
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    return 0


def run_script(script: str | Path, args: list[str], options: RunOptions) -> RunResult:
    """Run `script` under CUDA memory recording and write the snapshots described above.

    Errors that stop the run before the script starts (no CUDA, recording already active,
    unwritable output, no OOM observer with `on_oom_only`) raise RecordError."""
    script = Path(script)
    if not script.is_file():
        raise RecordError(f"no such script: {script}")
    if options.every_n_steps is not None and options.every_n_steps < 1:
        raise RecordError(f"--every-n-steps must be at least 1, got {options.every_n_steps}")
    backend = get_backend()
    require_available(backend)
    prepare_output(options.output)
    token = session.begin(options.settings, backend)
    harness = _Harness(backend, options)
    main_snapshot: Path | None = None
    try:
        harness.install()
        exit_code = _run_as_main(script, args)
    finally:
        harness.uninstall()
        try:
            if not options.on_oom_only:
                if session.switched_off(token):
                    _say(f"{options.output}: {session.SWITCHED_OFF_MESSAGE}")
                # announced with the summary, once the run is over
                main_snapshot = harness.dump(options.output, "at exit", announce=False)
        finally:
            session.end(token)
    oom_snapshot = harness.dumper.paths[0] if harness.dumper and harness.dumper.paths else None
    if main_snapshot is None:
        main_snapshot = oom_snapshot
    report = None
    if main_snapshot is not None and options.on_snapshot_written is not None:
        report = options.on_snapshot_written(main_snapshot)
    return RunResult(
        exit_code=exit_code,
        main_snapshot=main_snapshot,
        report=report,
        snapshots=list(dict.fromkeys(harness.written)),
        oom_snapshot=oom_snapshot,
    )

"""Which tests depend on the reader choice (MEMLENS_READER), found by running them.

CI runs the suite once on the compiled reader and replay (the default), then again with
MEMLENS_READER=python for the Python reader and the numpy replay (issue 11). memlens reads
that variable in two places only: `memlens.snapshot.read.compiled.mode` (the reader: every
pickle file opened by `memlens.load`) and `memlens.snapshot.native._python_asked` (the
replay of every device trace a snapshot is built with, and the capabilities report). A test
that never reaches either runs the same code on both passes, so its second run proves
nothing new. This plugin finds the others while the first pass runs:

    pytest --record-reader-tests=PATH   # the first pass: writes the node ids that asked
    pytest --reader-tests=PATH          # runs only those (with MEMLENS_READER=python)

A test counts when the choice was asked for
- while it ran (set-up, call, teardown), in any thread of the test process;
- while a fixture it uses was set up, earlier, for another test (a module- or
  session-scoped snapshot is read once and shared);
- while its module was imported or collected (a snapshot read at import time);
- or when it started a process that inherits the variable: a `subprocess.Popen` whose
  environment carries the run's MEMLENS_READER, other than the programs of NOT_MEMLENS,
  or any `multiprocessing` child. What a child process does is not seen, so any such
  child counts.

An ask counts only while MEMLENS_READER holds the run's own value: a test that sets it
(test_reader_agreement reads each file both ways, test_fastreplay replays each trace
both ways) gets the same answer on both passes. So that the run's value can be told from
a value a test sets (tests set `auto`, `python` or `compiled`, in lower case) and from an
environment built from nothing, the recording pass sets MEMLENS_READER to RECORDING, the
default spelt as no test spells it (memlens reads it case-blind: the same reader).

A fixture counts for the tests that use that very fixture (its definition, not any
fixture of the same name elsewhere), and only when it is module- or session-scoped: a
function-scoped one is set up inside each test's own run, where its asks are seen.

The recording pass also writes PATH.seconds, each test file's seconds in that pass
(set-up, call and teardown of its tests). The second pass, given it, hands the files out
longest first (run it with `--no-loadscope-reorder`, so that xdist keeps that order
rather than taking the files with the most tests first): a long file started last keeps
one worker busy after the other has finished. It also collects only the files it needs.

Over-counting costs only time; a test missed would lose the Python path's coverage, so
every rule above errs on the side of counting.
"""

from __future__ import annotations

import json
import multiprocessing.process
import os
import subprocess
import threading
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import pytest

READER_ENV = "MEMLENS_READER"
RECORDING = "Auto"  # the recording pass's MEMLENS_READER: `auto`, as no test spells it
# children that cannot run memlens: the browser and its driver, the video encoder, git
NOT_MEMLENS = frozenset({"chromium", "node", "ffmpeg", "ffprobe", "git", "npm", "npx"})

_lock = threading.Lock()
_asked = 0  # how many times the choice was asked for (or inherited by a child) so far
_outer = ""  # the run's MEMLENS_READER, as the recording pass found or set it


def _count(env: Any = None) -> None:
    """Count an ask, unless the test had set the variable itself: a test that picks its
    reader (monkeypatch.setenv, a child given its own environment) gets the same answer
    on both passes."""
    global _asked
    if (os.environ if env is None else env).get(READER_ENV) != _outer:
        return
    with _lock:
        _asked += 1


def _counting(fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _count()
        return fn(*args, **kwargs)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper


def _program(args: Any) -> str:
    first = args if isinstance(args, (str, bytes, os.PathLike)) else next(iter(args), "")
    name = os.fsdecode(first).split()[0] if isinstance(args, (str, bytes)) else os.fsdecode(first)
    return os.path.basename(name)


def _install_counters(monkeypatch: pytest.MonkeyPatch) -> None:
    from memlens.snapshot import native
    from memlens.snapshot.read import compiled

    monkeypatch.setattr(native, "_python_asked", _counting(native._python_asked))
    monkeypatch.setattr(compiled, "mode", _counting(compiled.mode))

    popen_init = subprocess.Popen.__init__

    def init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        if _program(args) not in NOT_MEMLENS:
            _count(kwargs.get("env"))
        popen_init(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", init)
    monkeypatch.setattr(
        multiprocessing.process.BaseProcess,
        "start",
        _counting(multiprocessing.process.BaseProcess.start),
    )


@pytest.fixture(autouse=True)
def _reader_choice_kept() -> Generator[None]:
    """A test that changes MEMLENS_READER must put it back: the tests after it in the same
    worker would run on another reader than their pass asked for (the second pass's
    Python reader lost without a word) and, in the recording pass, go unlisted."""
    before = os.environ.get(READER_ENV)
    yield
    after = os.environ.get(READER_ENV)
    if after != before:
        if before is None:
            os.environ.pop(READER_ENV, None)
        else:
            os.environ[READER_ENV] = before
        pytest.fail(f"the test left {READER_ENV}={after!r} (it was {before!r}): put it back")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memlens reader choice")
    group.addoption(
        "--record-reader-tests",
        metavar="PATH",
        help="write to PATH the node ids of the tests that asked which reader/replay to use",
    )
    group.addoption(
        "--reader-tests",
        metavar="PATH",
        help="run only the tests listed in PATH (written by --record-reader-tests)",
    )


class _Recorder:
    """Counts, per test, whether the reader choice was asked for; writes the ids at the end."""

    def __init__(self, path: Path, part: str) -> None:
        self.path = path
        self.part = part
        self.prefixes: set[str] = set()  # collectors (modules, classes) that asked
        # module- and session-scoped fixtures (their definitions) whose set-up asked
        self.fixtures: set[pytest.FixtureDef[Any]] = set()
        self.seconds: dict[str, float] = {}  # seconds per test file (the controller's)
        self.tests: list[str] = []
        # asks seen inside the collectors being collected now, innermost last: a
        # collector that collects others (a session given a file) counts only its own
        self.nested: list[int] = []

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None]:
        before = _asked
        self.nested.append(0)
        yield
        inner = self.nested.pop()
        delta = _asked - before
        if self.nested:
            self.nested[-1] += delta
        if delta > inner:
            self.prefixes.add(collector.nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Generator[None]:
        before = _asked
        yield
        if _asked != before and fixturedef.scope != "function":
            self.fixtures.add(fixturedef)

    def _uses_a_fixture_that_asked(self, item: pytest.Item) -> bool:
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            return False
        return any(
            fixturedef in self.fixtures
            for name in info.names_closure
            for fixturedef in info.name2fixturedefs.get(name, ())
        )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None]:
        before = _asked
        yield
        if (
            _asked != before
            or self._uses_a_fixture_that_asked(item)
            or any(_under(item.nodeid, prefix) for prefix in self.prefixes)
        ):
            self.tests.append(item.nodeid)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # under xdist the controller gets every worker's reports: it alone writes them
        path = report.nodeid.split("::", 1)[0]
        self.seconds[path] = self.seconds.get(path, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        parts = self.path.with_name(self.path.name + ".parts")
        parts.mkdir(parents=True, exist_ok=True)
        (parts / self.part).write_text("".join(f"{t}\n" for t in self.tests))
        if self.part == "main":  # the controller (or a run without xdist): merge the parts
            ids = sorted({t for p in parts.iterdir() for t in p.read_text().splitlines()})
            self.path.write_text("".join(f"{t}\n" for t in ids))
            for p in parts.iterdir():
                p.unlink()
            parts.rmdir()
            seconds = {path: round(s, 3) for path, s in sorted(self.seconds.items())}
            _seconds_path(self.path).write_text(json.dumps(seconds, indent=0) + "\n")


def _seconds_path(ids: Path) -> Path:
    return ids.with_name(ids.name + ".seconds")


def _under(nodeid: str, prefix: str) -> bool:
    return prefix == "" or nodeid == prefix or nodeid.startswith((prefix + "::", prefix + "/"))


class _Selector:
    """Keeps only the tests listed in the file; a listed test no longer collected fails
    the run (its id changed between the passes, so it would silently not run). Collects
    only the files they are in, and orders the files longest first when the recording
    pass's seconds are there."""

    def __init__(self, wanted: set[str], seconds: dict[str, float]) -> None:
        self.wanted = wanted
        self.files = {nodeid.split("::", 1)[0] for nodeid in wanted}
        self.seconds = seconds

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        # a test file with none of the listed tests is not even imported (every worker
        # would otherwise import all of them); anything else is pytest's to decide
        if not self.files or not collection_path.name.startswith("test_"):
            return None
        if collection_path.suffix != ".py" or not collection_path.is_file():
            return None
        try:
            path = collection_path.relative_to(config.rootpath).as_posix()
        except ValueError:
            return None
        return None if path in self.files else True

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        missing = self.wanted - {item.nodeid for item in items}
        if missing:
            raise pytest.UsageError(
                f"--reader-tests: {len(missing)} listed tests were not collected, e.g. "
                f"{sorted(missing)[0]}"
            )
        keep = [item for item in items if item.nodeid in self.wanted]
        # longest file first; a stable sort keeps each file's own order
        keep.sort(key=lambda item: -self.seconds.get(item.nodeid.split("::", 1)[0], 0.0))
        dropped = [item for item in items if item.nodeid not in self.wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_configure(config: pytest.Config) -> None:
    record = config.getoption("record_reader_tests")
    select = config.getoption("reader_tests")
    if record:
        global _outer
        if READER_ENV not in os.environ:  # see the module's docstring
            os.environ[READER_ENV] = RECORDING
            # not left behind by a run made inside another (tests/test_reader_choice.py)
            config.add_cleanup(_forget_recording_value)
        _outer = os.environ[READER_ENV]
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        part = workerinput["workerid"] if workerinput else "main"
        patcher = pytest.MonkeyPatch()
        _install_counters(patcher)
        config.add_cleanup(patcher.undo)
        config.pluginmanager.register(_Recorder(Path(record), part), "memlens-reader-recorder")
    if select:
        ids = Path(select)
        seconds_path = _seconds_path(ids)
        seconds = json.loads(seconds_path.read_text()) if seconds_path.exists() else {}
        config.pluginmanager.register(_Selector(_read_ids(ids), seconds), "memlens-reader-select")


def _forget_recording_value() -> None:
    os.environ.pop(READER_ENV, None)


def _read_ids(path: Path) -> set[str]:
    lines: Iterable[str] = path.read_text().splitlines()
    return {line for line in lines if line}

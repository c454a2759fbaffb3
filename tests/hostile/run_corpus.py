"""Run snapshot files through memlens commands, each in its own forked child with the
issue's budget (20 s, 2 GB of address space beyond what the parent had mapped), and print one JSON result per line.

`python tests/hostile/run_corpus.py FILE...` - memlens is imported once here, then every
(file, command) pair runs in a fork, so a few hundred cases cost seconds, not minutes,
while each case is still a separate process whose exit code, output and resources are
its own. Commands: the CLI's summary, peak and report, and the viewer's HTTP API (every
endpoint, through Starlette's test client, as the browser would call it).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TIME_LIMIT_S = 20
MEMORY_LIMIT = 2 << 30
COMMANDS = ("summary", "peak", "report", "view-api")


def _viewer_api(path: str) -> int:
    """Every viewer endpoint on the file: 0 if each answers 200 or 400 with JSON."""
    from starlette.testclient import TestClient

    from memlens.cli.main import main as _unused  # noqa: F401  (same imports as the CLI)
    from memlens.errors import MemlensError
    from memlens.snapshot.loader import load
    from memlens.views.web.data import ViewerData
    from memlens.views.web.server import create_app

    try:
        snap = load(path, cache=False)
    except MemlensError as exc:
        print(f"memlens: error: {exc}", file=sys.stderr)
        return 2
    client = TestClient(create_app(ViewerData([snap], [path])), base_url="http://127.0.0.1")
    meta = client.get("/api/meta")
    print(meta.text[:20000])
    if meta.status_code != 200:
        return 1
    for d in sorted(snap.traces) or [0]:
        for url in (
            f"/api/d/{d}/view?width=800&height=300",
            f"/api/d/{d}/view?width=800&height=300&e0=0&e1=3",
            f"/api/d/{d}/summary",
            f"/api/d/{d}/live?event=2",
            f"/api/d/{d}/annotations",
            f"/api/d/{d}/alloc/0",
            "/api/compare?d0=0&d1=0",
        ):
            r = client.get(url)
            print(url, r.status_code, r.text[:20000])
            if r.status_code not in (200, 400):
                return 1
    return 0


def _mapped_bytes() -> int:
    """Address space this process has mapped now (0 where /proc is absent)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _child(path: str, command: str, out_dir: str) -> None:
    # the budget is for the case's own work: a fork of a pytest worker that earlier tests
    # left with torch, Chromium's driver and thread stacks mapped starts near 2 GB already
    limit = MEMORY_LIMIT + _mapped_bytes()
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.alarm(TIME_LIMIT_S)
    out = os.open(os.path.join(out_dir, "stdout"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(os.path.join(out_dir, "stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(err, 2)
    # as a terminal would get them (under pytest, sys.stdout is a capture object)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    os.environ["MEMLENS_NO_CACHE"] = "1"
    for key in [k for k in os.environ if k.startswith("MEMLENS_MAX_") or k == "MEMLENS_DEBUG"]:
        del os.environ[key]  # the default limits, whatever the calling process set
    code = 0
    try:
        if command == "view-api":
            code = _viewer_api(path)
        else:
            from memlens.cli.main import main

            args = [command, path]
            if command == "report":
                args += ["-o", os.path.join(out_dir, "report.html")]
            main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(path: str, command: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as out_dir:
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            _child(path, command, out_dir)
        _, status, usage = os.wait4(pid, 0)
        elapsed = time.monotonic() - t0
        result = {
            "file": Path(path).name,
            "command": command,
            "seconds": round(elapsed, 2),
            "max_rss_mb": round(usage.ru_maxrss / 1024, 1),
            "exit": os.waitstatus_to_exitcode(status),
            "stdout": Path(out_dir, "stdout").read_text(errors="replace")[-4000:],
            "stderr": Path(out_dir, "stderr").read_text(errors="replace")[-4000:],
        }
        report = Path(out_dir, "report.html")
        if report.exists():
            result["report_bytes"] = report.stat().st_size
        return result


def warm_up() -> None:
    """Import what the children need once, so each fork starts warm."""
    import importlib

    for module in ("memlens.cli.main", "memlens.cli.summary", "memlens.cli.peak",
                   "memlens.cli.report", "memlens.snapshot.loader", "memlens.views.web.server",
                   "memlens.views.web.data", "starlette.testclient"):  # fmt: skip
        # another helper's module mid-move: the child will say so itself
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def main(argv: list[str]) -> None:
    commands: tuple[str, ...] = COMMANDS
    if argv and argv[0].startswith("--commands="):
        commands = tuple(argv[0].split("=", 1)[1].split(","))
        argv = argv[1:]
    warm_up()
    for path in argv:
        for command in commands:
            print(json.dumps(run(path, command)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

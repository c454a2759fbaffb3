"""Load a snapshot in a child process, in a thread beside another (as in a Dask worker or
a notebook kernel, where `RLIMIT_AS` could not bound memlens), under an address-space
limit and a time limit of the child's own: code that does not bound its work fails a test
by a MemoryError, a timeout or an exit 0, never by taking the machine's memory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, threading
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), resource.RLIM_INFINITY))
    import memlens
    from memlens.snapshot.limits import LimitExceeded
    from memlens.errors import SnapshotError
    out = {}
    def work():
        try:
            memlens.load(sys.argv[1], cache=False, warn=False)
            out["result"] = "loaded"
        except LimitExceeded as exc:
            out["result"] = "limit " + exc.name
            out["message"] = str(exc)
        except SnapshotError as exc:
            out["result"] = "error"
            out["message"] = str(exc)
        except MemoryError:
            out["result"] = "MemoryError"
    idle = threading.Event()
    threading.Thread(target=idle.wait, daemon=True).start()  # a second thread, as in a host
    t = threading.Thread(target=work)
    t.start()
    t.join()
    idle.set()
    print(json.dumps(out))
    """
)


def load_in_thread(
    path: Path, reader: str, address_space: int = 3 << 30, timeout: float = 120
) -> dict[str, str]:
    """{"result": loaded | limit NAME | error | MemoryError | timeout, "message": ...}"""
    env = {"MEMLENS_READER": reader, "MEMLENS_NO_CACHE": "1", "PATH": "/usr/bin:/bin"}
    env["PYTHONPATH"] = ":".join(sys.path)
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(path), str(address_space)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"result": "timeout"}
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result

"""Cost of `memlens plan`: one simulation of the shared 423M-parameter script (the
third-party cs336 training step in ../shared/workloads/cs336_medium, --gpu a100) against a
6-point sweep of its context length on plan's own pool (forkserver, a fresh process per
point, --jobs 2), each point's CPU seconds measured inside its worker.

    python benchmarks/bench_plan.py            # results: docs/plan.md, "Cost"

On a 2-core machine the sweep's ideal is 3x the one simulation's wall time (6 points, 2
at a time); the CPU sum shows whether a point costs more in a sweep than alone.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT.parent / "shared" / "workloads" / "cs336_medium"
BASE = [
    "--context_length",
    "128",
    "--d_model",
    "1024",
    "--d_ff",
    "4096",
    "--num_layers",
    "24",
    "--num_heads",
    "16",
    "--model_name",
    "medium",
    "--memory-profile",
    "true",
    "--pattern",
    "full-training-step",
]
CONTEXTS = (64, 128, 192, 256, 384, 512)


def job(a: tuple[int, str, list[str], dict]) -> tuple[int, float, float]:  # type: ignore[type-arg]
    from memlens.planning.points import simulate_point

    i, script, argv, options = a
    cpu, wall = time.process_time(), time.monotonic()
    simulate_point(script, argv, options)
    return i, time.process_time() - cpu, time.monotonic() - wall


def main() -> None:
    from memlens.planning.points import _context, with_value

    if not WORKLOAD.is_dir():
        sys.exit(f"{WORKLOAD} is absent")
    root = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    shutil.copytree(WORKLOAD / "cs336_basics", root / "cs336_basics")
    (root / "cs336_systems").mkdir()
    shutil.copy(WORKLOAD / "nsys_profile.py", root / "cs336_systems")
    os.chdir(root / "cs336_systems")
    sys.path.insert(0, str(root))  # PYTHONPATH=.. as the workload's README says
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    options = {"gpu": "a100", "device_memory": None, "alloc_conf": ""}
    for contexts, workers in (((128,), 1), (CONTEXTS, 2)):
        jobs = [(i, "nsys_profile.py", with_value(BASE, "--context_length", str(c)), options)
                for i, c in enumerate(contexts)]  # fmt: skip
        load = os.getloadavg()[0]
        started = time.monotonic()
        with _context().Pool(workers, maxtasksperchild=1) as pool:
            rows = sorted(pool.imap_unordered(job, jobs))
        wall = time.monotonic() - started
        print(f"{len(contexts)} point(s), pool of {workers}: wall {wall:.1f} s (load "
              f"{load:.1f} -> {os.getloadavg()[0]:.1f}); CPU per point "
              f"{[round(r[1], 1) for r in rows]} s, sum {sum(r[1] for r in rows):.1f} s",
              flush=True)  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

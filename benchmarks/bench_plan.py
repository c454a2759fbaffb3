"""Cost of `memlens plan` on the shared 423M-parameter script (the third-party cs336
training step in ../shared/workloads/cs336_medium), with and without --interpolate.

    python benchmarks/bench_plan.py              # results: docs/plan.md, "Cost"
    python benchmarks/bench_plan.py --find-max   # 1 and 3 only (issue 34's question)

1. One simulation alone (the unit every figure below is compared with), its wall time.
2. A 20-point sweep of --context_length (64..1280 step 64) with --interpolate: the
   simulations it took, its wall time; then three of its interpolated points simulated
   afterwards, which must equal the interpolated figures to the byte (peak active and
   reserved).
3. find-max on --context_length in [128, 2048] for a 24 GB card (`--gpu h100
   --device-memory 24564MiB`, the default 512 MiB reserve: docs/plan.md's worked example)
   with --interpolate: simulations, wall and CPU, the answer with its margin and
   shortfall, against the one simulation's wall.

Every run uses a fresh cache directory (nothing comes from an earlier run) and plan's own
pool (--jobs 2). With --find-max, the one simulation is at context 808 on the same card
(find-max's answer: the costliest value that runs to its end there). The load average is
printed beside each figure: on a shared machine the walls say as much about the
neighbours as about memlens. CPU is this process's and all its descendants' (the pool's
workers are the forkserver's children: /proc gives the times of the children it reaped).
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memlens.planning.plan import Setup

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT.parent / "shared" / "workloads" / "cs336_medium"
MODEL = [
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
SWEEP = ",".join(str(c) for c in range(64, 1281, 64))  # 20 values
CHECKS = ("320", "832", "1088")  # interpolated in the sweep, simulated afterwards
# find-max's answer on the 24 GB card: the costliest point that runs to its end there (a
# larger one stops at its OOM, and costs less)
ONE = "808"


def _say(line: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def _cpu() -> float:
    """CPU seconds of this process and its reaped children, and of every live (or not
    yet reaped) descendant with the children it reaped: the forkserver, and the pool
    workers it forked, whether it has reaped them yet or not."""
    total = sum(
        r.ru_utime + r.ru_stime
        for r in (resource.getrusage(resource.RUSAGE_SELF),
                  resource.getrusage(resource.RUSAGE_CHILDREN))
    )  # fmt: skip
    return total + sum(_tree_cpu(pid) for pid in _children("self"))


def _children(pid: str) -> list[str]:
    try:
        return [c for t in Path(f"/proc/{pid}/task").iterdir()
                for c in (t / "children").read_text().split()]  # fmt: skip
    except OSError:  # it ended meanwhile
        return []


def _tree_cpu(pid: str) -> float:
    """utime + stime + cutime + cstime of `pid`, and the same of its descendants."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # reaped meanwhile: its parent's cutime has it
        return 0.0
    own = sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return own + sum(_tree_cpu(c) for c in _children(pid))


def _timed(label: str, run):  # type: ignore[no-untyped-def]
    """(the result, its wall seconds), with wall, CPU and load printed."""
    load = os.getloadavg()[0]
    cpu = _cpu()
    started = time.monotonic()
    result = run()
    wall = time.monotonic() - started
    print(
        f"{label}: wall {wall:.1f} s, CPU {_cpu() - cpu:.1f} s, simulations "
        f"{result['simulations']} (load {load:.1f} -> {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    return result, wall


def _workdir() -> Path:
    """A scratch copy of the workload, the current folder its script's, with a fresh
    cache."""
    if not WORKLOAD.is_dir():
        sys.exit(f"{WORKLOAD} is absent")
    root = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    shutil.copytree(WORKLOAD / "cs336_basics", root / "cs336_basics")
    (root / "cs336_systems").mkdir()
    shutil.copy(WORKLOAD / "nsys_profile.py", root / "cs336_systems")
    os.chdir(root / "cs336_systems")
    sys.path.insert(0, str(root))  # PYTHONPATH=.. as the workload's README says
    os.environ["PYTHONPATH"] = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    os.environ["MEMLENS_CACHE_DIR"] = str(root / "cache")
    return root


def main() -> None:
    from memlens.planning.plan import Setup, plan
    from memlens.planning.sweep import Sweep

    root = _workdir()
    a100 = Setup.of("a100", None, None)
    card = Setup.of("h100", "24564MiB", None)  # a 24 GB card: docs/plan.md's worked example
    common = {"jobs": 2, "progress": _say}

    if "--find-max" in sys.argv[1:]:
        _, one_wall = _timed(
            f"one simulation (--context_length {ONE}, the 24 GB card)",
            lambda: plan("nsys_profile.py", ["--context_length", ONE, *MODEL], setup=card,
                         use_cache=False, **common),
        )  # fmt: skip
        _find_max(card, one_wall, common)
        shutil.rmtree(root, ignore_errors=True)
        return
    _, one_wall = _timed(
        "one simulation (--context_length 128, a100)",
        lambda: plan("nsys_profile.py", ["--context_length", "128", *MODEL], setup=a100, **common),
    )
    swept, _ = _timed(
        "20-point sweep, --interpolate",
        lambda: plan("nsys_profile.py", MODEL, sweeps=[Sweep("--context_length", tuple(SWEEP.split(",")))],
                     setup=a100, interpolate=True, **common),
    )  # fmt: skip
    rows = {p["values"]["--context_length"]: p for p in swept["points"]}
    print("  sources:", {v: p["source"] for v, p in rows.items()})
    checked, _ = _timed(
        f"check: {', '.join(CHECKS)} simulated",
        lambda: plan("nsys_profile.py", MODEL, sweeps=[Sweep("--context_length", CHECKS)],
                     setup=a100, **common),
    )  # fmt: skip
    for p in checked["points"]:
        v = p["values"]["--context_length"]
        got = rows[v]
        same = (got["peak_active_bytes"], got["peak_reserved_bytes"]) == (
            p["peak_active_bytes"], p["peak_reserved_bytes"])  # fmt: skip
        print(f"  {v}: {got['source']} {got['peak_active_bytes']:,} / {got['peak_reserved_bytes']:,}"
              f", simulated {p['peak_active_bytes']:,} / {p['peak_reserved_bytes']:,}: "
              f"{'equal' if same else 'DIFFERENT'}")  # fmt: skip
    _find_max(card, one_wall, common)
    shutil.rmtree(root, ignore_errors=True)


def _find_max(card: Setup, one_wall: float, common: dict[str, Any]) -> None:
    """Issue 34's question: the largest context length for a 24 GB card."""
    from memlens.planning.plan import plan

    found, found_wall = _timed(
        "find-max --context_length in [128, 2048], 24 GB card, --interpolate",
        lambda: plan("nsys_profile.py", MODEL, setup=card, find=("--context_length", 128, 2048),
                     interpolate=True, use_cache=False, **common),
    )  # fmt: skip
    f = found["find_max"]
    simulated = [p["values"]["--context_length"] for p in f["probes"] if p["source"] == "simulated"]
    print(
        f"  answer {f['largest_fitting']} (step {f['step']}), margin {f['margin_bytes']:,}, "
        f"shortfall {f['shortfall_bytes']:,}, not fitting below: {f['failing']}, "
        f"confirmed {f['confirmed']}, simulated values looked at {simulated}; "
        f"{found_wall / one_wall:.1f}x one simulation's wall"
    )


if __name__ == "__main__":
    main()

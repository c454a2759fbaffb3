"""Will it fit, on a real GPU: the unedited cs336 script's peaks at 20 context lengths, and
the largest context that fits in an RTX 4090's usable memory, found by running it.

Run on a GPU machine (prepare.sh's wheels first: einx, frozendict):

    python3 benchmarks/gpu_truth/sweep.py OUTDIR [sweep|search|all]

Each run is `cap_run.py` (the script unedited as __main__, PyTorch's allocator capped with
set_per_process_memory_fraction at CAP bytes, or uncapped) in its own process; one JSON line
per run in OUTDIR/cs336_gpu.jsonl. The capped search is monotone bisection with five probes
a round, then the values around its answer (peak reserved is not monotone in the context
length). What a run on an H200 (torch 2.11) gave is results/cs336_h200_sweep.jsonl;
docs/plan.md compares it with `memlens plan --gpu h100 --interpolate`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "workloads" / "cs336_medium"
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
# A 24 GB card (an RTX 4090's 24564 MiB) less memlens plan's default reserve (512 MiB):
# what `plan --device-memory 24564MiB` lets PyTorch's allocator reserve
CAP = (24564 - 512) * 2**20
BUDGET_S = 330  # of a 10-minute device call: leave room for the start and the transfer


def main() -> None:
    out_dir = Path(sys.argv[1])
    phase = sys.argv[2] if len(sys.argv) > 2 else "all"
    out_dir.mkdir(parents=True, exist_ok=True)
    # the script's layout as its README runs it: cs336_systems/ beside cs336_basics/,
    # its snapshots in ../results/
    work = Path(tempfile.mkdtemp(prefix="cs336-sweep-"))
    shutil.copytree(WORKLOAD / "cs336_basics", work / "cs336_basics")
    (work / "cs336_systems").mkdir()
    (work / "results").mkdir()
    shutil.copy(WORKLOAD / "nsys_profile.py", work / "cs336_systems")
    runner = Runner(work, out_dir / "cs336_gpu.jsonl")
    if phase in ("all", "sweep"):
        values = list(range(64, 1281, 64))
        # big and small interleaved: three uncapped runs at once stay within an H200
        order = [v for pair in zip(values[::-1], values) for v in pair][: len(values)]
        runner.batch(order, 0, workers=3)
    if phase in ("all", "search"):
        runner.search(128, 2048)


class Runner:
    def __init__(self, work: Path, log: Path) -> None:
        self.work = work
        self.log = log.open("a")
        self.start = time.monotonic()
        path = [str(work), os.environ.get("PYTHONPATH", "")]
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))

    def one(self, ctx: int, cap: int) -> dict[str, Any]:
        argv = [sys.executable, str(HERE / "cap_run.py"), str(cap), "nsys_profile.py"]
        argv += ["--context_length", str(ctx), *MODEL]
        p = subprocess.run(
            argv, cwd=self.work / "cs336_systems", env=self.env, capture_output=True,
            text=True, timeout=240,
        )  # fmt: skip
        lines = [line for line in p.stdout.splitlines() if line.startswith("RESULT ")]
        r = json.loads(lines[-1][7:]) if lines else {"status": f"rc={p.returncode}"}
        r.update(ctx=ctx, cap=cap, t=round(time.monotonic() - self.start, 1))
        self.log.write(json.dumps(r) + "\n")
        self.log.flush()
        print(ctx, "capped" if cap else "free", r["status"], r.get("peak_reserved"), flush=True)
        return r

    def batch(self, values: Iterable[int], cap: int, workers: int = 5) -> list[dict[str, Any]]:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(lambda v: self.one(v, cap), values))

    def search(self, lo: int, hi: int) -> None:
        fits: dict[int, bool] = {}
        while hi - lo > 1 and time.monotonic() - self.start < BUDGET_S:
            n = min(5, hi - lo - 1)
            probes = sorted({lo + (hi - lo) * (i + 1) // (n + 1) for i in range(n)})
            for r in self.batch(probes, CAP):
                fits[r["ctx"]] = r["status"] == "ok"
            bad = [v for v in probes if not fits[v]]
            lo = max([lo] + [v for v in probes if fits[v] and all(v < b for b in bad)])
            hi = min([hi, *bad])
            print("interval", lo, hi, flush=True)
        print("largest fitting (monotone search)", lo, "first failing", hi, flush=True)
        around = [v for v in range(lo - 12, lo + 13) if v not in fits and v > 0]
        if time.monotonic() - self.start < BUDGET_S:
            self.batch(around[:15], CAP)


if __name__ == "__main__":
    main()

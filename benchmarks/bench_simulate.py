"""Cost and accuracy of `memlens simulate` on the cs336 workload (3.4B parameters).

    python benchmarks/bench_simulate.py            # every case, markdown table on stdout
    python benchmarks/bench_simulate.py --case ctx128_fullstep

Each case runs in a fresh interpreter so that its wall time and peak RSS are its own.
Accuracy columns need ../shared/snapshots (skipped when absent). Results are kept in
docs/benchmarks-simulate.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEMLENS_SHARED_SNAPSHOTS", ROOT.parent / "shared" / "snapshots"))
CASES = {  # name -> (context, fullstep, mixed, recorded file)
    "ctx128_forward": (128, False, False, "cs336_memory_ctx128_forward.pickle"),
    "ctx128_forward_mixed": (128, False, True, "cs336_memory_ctx128_forward_mixed.pickle"),
    "ctx128_fullstep": (128, True, False, "cs336_memory_ctx128_fullstep.pickle"),
    "ctx256_fullstep": (256, True, False, "cs336_memory_ctx256_fullstep.pickle"),
    "ctx512_forward": (512, False, False, "cs336_memory_ctx512_forward.pickle"),
}


def run_case(name: str) -> dict:
    """Simulate one case in this process; returns its figures."""
    sys.path.insert(0, str(ROOT / "tests" / "simulate"))
    from cs336_model import run

    import memlens

    context, fullstep, mixed, recorded = CASES[name]
    start = time.perf_counter()
    with memlens.simulate() as sim:
        keep = run(context, fullstep, mixed)
    seconds = time.perf_counter() - start
    del keep
    dev = memlens.load(sim.snapshot).device(0)
    out = {
        "case": name,
        "seconds": round(seconds, 2),
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "events": dev.n_events,
        "baseline": dev.baseline_bytes,
        "peak_active": dev.peak_active_bytes,
        "peak_reserved": dev.peak_reserved_bytes,
        "end_reserved": dev.end_reserved_bytes,
    }
    expected = SHARED / "expected.json"
    if expected.exists():
        real = json.loads(expected.read_text())[recorded]
        out["real"] = {
            k: real[k + "_bytes"]
            for k in ("baseline", "peak_active", "peak_reserved", "end_reserved")
        }
        out["real"]["events"] = real["trace_entries"]
    return out


def pct(sim: int, real: int) -> str:
    return f"{100 * (sim - real) / real:+.3f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=list(CASES))
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case and args.json:
        print(json.dumps(run_case(args.case)))
        return
    results = []
    for name in [args.case] if args.case else list(CASES):
        proc = subprocess.run(
            [sys.executable, __file__, "--case", name, "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    gib = 2**30
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"torch {__import__('torch').__version__}\n"
    )
    print(
        "| case | wall s | peak RSS MiB | events (real) | peak active GiB (error) "
        "| peak reserved GiB (error) | end reserved (error) | baseline (error) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        real = r.get("real")

        def err(key: str, r: dict = r, real: dict | None = real) -> str:
            return f" ({pct(r[key], real[key])})" if real else ""

        events = f"{r['events']} ({real['events']})" if real else str(r["events"])
        print(
            f"| {r['case']} | {r['seconds']} | {r['max_rss_mib']} | {events} "
            f"| {r['peak_active'] / gib:.3f}{err('peak_active')} "
            f"| {r['peak_reserved'] / gib:.3f}{err('peak_reserved')} "
            f"| {r['end_reserved'] / gib:.3f}{err('end_reserved')} "
            f"| {r['baseline'] / gib:.3f}{err('baseline')} |"
        )


if __name__ == "__main__":
    main()

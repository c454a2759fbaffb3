"""Benchmark `memlens fleet`: 1,000 ranks of about 20k events each.

    python benchmarks/bench_fleet.py                 # generate once, measure, print
    python benchmarks/bench_fleet.py --write         # also write docs/benchmarks-fleet.md
    python benchmarks/bench_fleet.py --ranks 200     # a smaller fleet

The fleet (memlens.simulation.synthetic_fleet, three planted skews) is written once into
benchmarks/data/fleet_<ranks>x<events>/ (git-ignored). Each measurement runs in a fresh
Python process so that its peak RSS (ru_maxrss of the parent only: workers are separate
processes) is its own; the column cache is off (every rank is read from its pickle, as
on a first run) unless --cache. Measured:

* one process: rank_record on each file in a loop, no pool (the baseline, on a subset);
* the local pool (ProcessPoolExecutor, one worker per core): files/s, parent peak RSS
  at 100 ranks and at all of them (it must not grow with the rank count);
* a Dask LocalCluster of 2 worker processes (dask-local): the same.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
DOC = HERE.parent / "docs" / "benchmarks-fleet.md"
SKEWS = {3: "leak", 500: "activations", 997: "pipeline"}
# realistic shapes: the generator's defaults (6 layers, hidden 256, 2,048 tokens)
SHAPE = {"layers": 6, "hidden": 256, "batch_tokens": 2048}


def _write_rank(args: tuple[str, int, str | None, int]) -> None:
    import pickle

    from memlens.simulation.synthetic_fleet import rank_snapshot

    path, rank, skew, events = args
    with open(path, "wb") as fh:
        pickle.dump(rank_snapshot(rank, skew, events=events, **SHAPE), fh, protocol=4)


def ensure_fleet(ranks: int, events: int) -> Path:
    """The fleet directory, generated in parallel the first time."""
    out = DATA / f"fleet_{ranks}x{events}"
    done = out / ".complete"
    if done.exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    skews = {r: s for r, s in SKEWS.items() if r < ranks}
    jobs = [(str(out / f"rank{r:05d}.pickle"), r, skews.get(r), events) for r in range(ranks)]
    t0 = time.perf_counter()
    with ProcessPoolExecutor() as pool:
        list(pool.map(_write_rank, jobs, chunksize=8))
    done.write_text(json.dumps({"skews": skews, "seconds": time.perf_counter() - t0}))
    return out


# ---- one measurement, in its own process ---------------------------------------------
def measure(mode: str, paths: list[str], cache: bool) -> dict[str, Any]:
    from memlens.fleet.api import run
    from memlens.fleet.record import rank_record

    t0, c0 = time.perf_counter(), time.process_time()
    if mode == "serial":
        outliers = None
        for i, p in enumerate(paths):
            rank_record(p, i, cache=cache)
    else:
        scheduler = "dask-local" if mode == "dask" else None
        r = run(paths, scheduler=scheduler, workers=2, cache=cache, diffs=3)
        outliers = sorted(o["rank"] for o in r["outliers"])
        assert r["ranks_total"] == len(paths) and r["ranks_failed"] == 0
    wall = time.perf_counter() - t0
    return {
        "mode": mode,
        "ranks": len(paths),
        "wall_s": wall,
        "files_per_s": len(paths) / wall,
        "parent_cpu_s": time.process_time() - c0,
        "parent_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "outliers": outliers,
    }


def run_measure(mode: str, paths: list[str], cache: bool, cache_dir: str) -> dict[str, Any]:
    """measure() in a fresh interpreter (its own peak RSS), paths passed in a file."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(paths, fh)
    env = {**os.environ, "MEMLENS_CACHE_DIR": cache_dir}
    code = (
        f"import json, sys; sys.path.insert(0, {str(HERE)!r}); from bench_fleet import measure; "
        f"print(json.dumps(measure({mode!r}, json.load(open({fh.name!r})), {cache!r})))"
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True)  # fmt: skip
    if out.returncode:
        raise SystemExit(f"{mode} on {len(paths)} ranks failed:\n{out.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    os.unlink(fh.name)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    # every process of the run (parent, forkserver, pool workers, Dask's) once reaped
    row["total_cpu_s"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return row


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | ranks | wall | files/s | parent CPU | CPU, all processes | parent peak RSS | outliers found |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    names = {"serial": "one process (no pool)", "local": "local pool, 2 processes",
             "dask": "Dask LocalCluster, 2 workers"}  # fmt: skip
    for r in rows:
        found = "" if r["outliers"] is None else ", ".join(map(str, r["outliers"]))
        lines.append(
            f"| {names[r['mode']]} | {r['ranks']:,} | {r['wall_s']:.1f} s | "
            f"{r['files_per_s']:.1f} | {r['parent_cpu_s']:.1f} s | {r['total_cpu_s']:.1f} s | "
            f"{r['parent_peak_rss_mib']:.0f} MiB | {found} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=1000)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument(
        "--serial", type=int, default=None, help="ranks of the one-process run (default: all)"
    )
    ap.add_argument("--cache", action="store_true", help="through the column cache")
    ap.add_argument("--skip-dask", action="store_true")
    ap.add_argument("--write", action="store_true", help=f"write {DOC.name}")
    args = ap.parse_args()
    fleet_dir = ensure_fleet(args.ranks, args.events)
    gen_s = json.loads((fleet_dir / ".complete").read_text())["seconds"]
    paths = sorted(str(p) for p in fleet_dir.glob("rank*.pickle"))
    size_mib = sum(os.path.getsize(p) for p in paths) / len(paths) / 2**20
    rows = []
    with tempfile.TemporaryDirectory() as cache_dir:
        plan = [
            ("serial", paths[: args.serial or len(paths)]),
            ("local", paths[:100]),
            ("local", paths),
        ]
        if not args.skip_dask:
            plan += [("dask", paths[:100]), ("dask", paths)]
        for mode, subset in plan:
            rows.append(run_measure(mode, subset, args.cache, cache_dir))
            print(json.dumps(rows[-1]), flush=True)
    load = os.getloadavg()
    text = "\n".join([
        f"{args.ranks:,} rank files of {args.events:,} events (~{size_mib:.1f} MiB each), "
        f"skews planted at ranks {', '.join(f'{r} ({s})' for r, s in SKEWS.items() if r < args.ranks)}; "
        f"column cache {'on' if args.cache else 'off'}. {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; load average at the end "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}. (Generating the fleet took {gen_s:.0f} s, once.)",
        "",
        table(rows),
    ])  # fmt: skip
    print(text)
    if args.write:
        doc = DOC.read_text() if DOC.exists() else ""
        start = "<!-- bench_fleet results -->"
        end = "<!-- end bench_fleet results -->"
        block = f"{start}\n{text}\n{end}"
        if start in doc and end in doc:
            doc = doc[: doc.index(start)] + block + doc[doc.index(end) + len(end) :]
        else:
            doc = doc + "\n" + block + "\n"
        DOC.write_text(doc)


if __name__ == "__main__":
    main()

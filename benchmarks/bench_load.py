"""Benchmark the snapshot engine: cold load vs pickle.load, cached reopen, queries.

    python benchmarks/bench_load.py                 # 10k, 100k, 1M events
    python benchmarks/bench_load.py --sizes 10000 100000 1000000 5000000
    python benchmarks/bench_load.py --whole --tiles 50 150 --generated 10000000
    python benchmarks/bench_load.py --whole --tiles 50 --repeat 9 --trees /tmp/main .  # A/B

Snapshots are generated (memlens.simulation.synthetic) into benchmarks/data/ once and reused.
Every load is timed in a fresh process so peak RSS (ru_maxrss) belongs to that load alone.
Prints a Markdown table (paste it into docs/benchmarks.md); --json prints the raw figures.

--whole times whole processes (issue 11): `pickle.load` of the file, then
`memlens summary --no-cache` with the compiled reader and with MEMLENS_READER=python; wall
time, CPU time (user + system) and peak RSS of each child (os.wait4). Files: a real
recording tiled N times (../shared/tools/tile_snapshot.py; --tile-source picks the
recording), the same with a frames list per allocation as PyTorch writes them (--fresh),
and generated ones. Children run with bytecode caching on, as an installed memlens does.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

PICKLE_LOAD = r"""
import pickle, resource, sys, time, gc, json
t = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    obj = pickle.load(f)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

MEMLENS_LOAD = r"""
import resource, sys, time, json
t0 = time.perf_counter()
import memlens
load = memlens.load  # imports the reader modules (numpy, ...) outside the timed region
t = time.perf_counter()
snap = load(sys.argv[1], cache=sys.argv[2] == "cache")
d = snap.device(0)
_ = d.peak_active_bytes
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "import_s": t - t0, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "events": d.n_events, "from_cache": snap.from_cache}))
"""

QUERIES = r"""
import json, sys, time, random
import numpy as np
import memlens
from memlens.analysis.sites import top_sites
from memlens.analysis.tree import live_tree
snap = memlens.load(sys.argv[1])
d = snap.device(0)
rng = random.Random(0)
events = [rng.randrange(d.n_events) for _ in range(200)]
def per_call(fn, xs):
    t = time.perf_counter()
    for x in xs: fn(x)
    return (time.perf_counter() - t) / len(xs)
out = {}
t = time.perf_counter(); p = d.peak_active_bytes; i = d.peak_event_index; out["peak_s"] = time.perf_counter() - t
out["active_at_s"] = per_call(d.active_at, events)
out["live_at_s"] = per_call(d.live_at, events[:50])
out["top_sites_at_peak_s"] = per_call(lambda e: top_sites(d, d.live_at(e), limit=10), [i] * 5)
out["live_tree_at_peak_s"] = per_call(lambda e: live_tree(d, e), [i] * 5)
print(json.dumps(out))
"""


def run(code: str, *args: str, env: dict | None = None) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def ensure_snapshot(events: int) -> Path:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"gen_{events}.pickle"
    if not path.exists():  # in a child, so this process stays small (see whole())
        t = time.perf_counter()
        code = (
            "import sys; from memlens.simulation.synthetic import generate_snapshot;"
            "generate_snapshot(sys.argv[1], events=int(sys.argv[2]), layers=24, seed=1)"
        )
        subprocess.run([sys.executable, "-c", code, str(path), str(events)], check=True)
        print(f"  generated {path.name} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return path


def bench(events: int, repeat: int) -> dict:
    path = ensure_snapshot(events)
    cache_dir = tempfile.mkdtemp(prefix="memlens-bench-cache-")
    env = {**os.environ, "MEMLENS_CACHE_DIR": cache_dir}
    best = lambda rows, k: min(r[k] for r in rows)  # noqa: E731
    pk = [run(PICKLE_LOAD, str(path)) for _ in range(repeat)]
    cold = [run(MEMLENS_LOAD, str(path), "nocache", env=env) for _ in range(repeat)]
    run(MEMLENS_LOAD, str(path), "cache", env=env)  # writes the cache
    warm = [run(MEMLENS_LOAD, str(path), "cache", env=env) for _ in range(repeat)]
    assert all(w["from_cache"] for w in warm)
    q = run(QUERIES, str(path), env=env)
    return {
        "events": cold[0]["events"],
        "file_mb": path.stat().st_size / 2**20,
        "pickle_s": best(pk, "seconds"),
        "pickle_rss_mb": best(pk, "rss_mb"),
        "cold_s": best(cold, "seconds"),
        "cold_rss_mb": best(cold, "rss_mb"),
        "warm_s": best(warm, "seconds"),
        "warm_rss_mb": best(warm, "rss_mb"),
        **q,
    }


def table(rows: list[dict]) -> str:
    head = (
        "| events | file | pickle.load | memlens cold | ratio | pickle RSS | memlens RSS | ratio | cached reopen "
        "| peak | memory at event | live set at event | top sites at peak | live tree at peak |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    lines = []
    for r in rows:
        lines.append(
            f"| {r['events']:,} | {r['file_mb']:.1f} MB | {r['pickle_s']:.2f} s | {r['cold_s']:.2f} s | "
            f"{r['cold_s'] / r['pickle_s']:.2f}x | {r['pickle_rss_mb']:.0f} MB | {r['cold_rss_mb']:.0f} MB | "
            f"{r['cold_rss_mb'] / r['pickle_rss_mb']:.2f}x | {r['warm_s'] * 1000:.0f} ms | {r['peak_s'] * 1000:.2f} ms | "
            f"{r['active_at_s'] * 1e6:.1f} µs | {r['live_at_s'] * 1000:.1f} ms | {r['top_sites_at_peak_s'] * 1000:.1f} ms | "
            f"{r['live_tree_at_peak_s'] * 1000:.1f} ms |"
        )
    return head + "\n".join(lines) + "\n"


REPO = HERE.parent
TILE_TOOL = REPO.parent / "shared" / "tools" / "tile_snapshot.py"
TILE_SOURCE = REPO.parent / "shared" / "snapshots" / "wedson_medium_128_training.pickle"


def ensure_tiled(source: Path, tiles: int) -> Path:
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"real_tiled_{tiles}.pickle"
    if not path.exists():
        subprocess.run(
            [sys.executable, str(TILE_TOOL), str(source), str(path), "-n", str(tiles)], check=True
        )
    return path


def ensure_fresh_stacks(tiled: Path) -> Path:
    """The tiled file rewritten the way a long PyTorch recording is: a new frames list per
    allocation (made of the shared frame dicts), shared only by that allocation's frees.
    The tile tool repeats one list object per stack, which hides the cost of interning a
    stack per allocation."""
    path = tiled.with_name(tiled.name.replace("real_tiled_", "real_fresh_"))
    if not path.exists():  # in a child: this process must stay small (see whole())
        code = f"import sys; sys.path.insert(0, {str(HERE)!r}); import bench_load; bench_load.write_fresh_stacks(sys.argv[1], sys.argv[2])"
        subprocess.run([sys.executable, "-c", code, str(tiled), str(path)], check=True)
    return path


def write_fresh_stacks(tiled_name: str, out_name: str) -> None:
    tiled, path = Path(tiled_name), Path(out_name)
    import pickle

    from memlens.snapshot.read.safe_pickle import loads_plain_pickle

    snap = loads_plain_pickle(tiled.read_bytes(), what=str(tiled))
    for trace in snap["device_traces"]:
        current: dict[int, list] = {}
        for e in trace:
            frames = e.get("frames")
            if frames is None:
                continue
            if e["action"] == "alloc":
                e["frames"] = current[e["addr"]] = list(frames)
            elif e["action"] in ("free_requested", "free_completed") and e["addr"] in current:
                e["frames"] = current[e["addr"]]
    with open(path, "wb") as f:
        pickle.dump(snap, f, protocol=pickle.HIGHEST_PROTOCOL)


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a timed child: as an installed memlens runs, with its modules'
    bytecode cached (pip compiles it at install), whatever this shell says."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONDONTWRITEBYTECODE", "MEMLENS_READER")
    }
    return {**env, **extra}


def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Wall time, CPU time and peak RSS of one child process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err[-2000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rss_mb": usage.ru_maxrss / 1024,
    }


def whole(path: Path, label: str, repeat: int) -> dict:
    pickle_cmd = [sys.executable, "-c", "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))"]
    summary_cmd = [sys.executable, "-m", "memlens", "summary", "--no-cache", str(path)]
    python_env = child_env(MEMLENS_READER="python")
    compiled_env = child_env()
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "src")], check=True)
    runs: dict[str, list[dict]] = {"pickle": [], "compiled": [], "python": []}
    for _ in range(repeat):  # interleaved, so a busy spell on the machine hits all three
        runs["pickle"].append(measure([*pickle_cmd, str(path)], child_env()))
        runs["compiled"].append(measure(summary_cmd, compiled_env))
        runs["python"].append(measure(summary_cmd, python_env))
    best = {k: min(v, key=lambda r: r["wall_s"]) for k, v in runs.items()}
    # counted in a child: a child's peak RSS starts from this process's at fork, so this
    # process must not hold a loaded snapshot while the next file's children run
    count = "import memlens,sys; print(sum(t.n_events for t in memlens.load(sys.argv[1], cache=False).traces.values()))"
    events = int(subprocess.run([sys.executable, "-c", count, str(path)], capture_output=True,
                                text=True, check=True).stdout)  # fmt: skip
    return {"file": label, "events": events, "file_mb": path.stat().st_size / 2**20, **{
        f"{k}_{m}": best[k][m] for k in best for m in ("wall_s", "cpu_s", "rss_mb")
    }}  # fmt: skip


def trees(path: Path, label: str, roots: list[Path], repeat: int) -> list[dict]:
    """`memlens summary --no-cache` from each source tree in turn (each with its extension
    built in place), interleaved, so that a busy spell on the machine hits every tree:
    best wall time, least CPU time, peak RSS of the best run."""
    for root in roots:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root / "src")], check=True)
    cmd = [sys.executable, "-m", "memlens", "summary", "--no-cache", str(path)]
    runs: dict[Path, list[dict]] = {root: [] for root in roots}
    for _ in range(repeat):
        for root in roots:
            runs[root].append(measure(cmd, child_env(PYTHONPATH=str(root / "src"))))
    rows = []
    for root, got in runs.items():
        best = min(got, key=lambda r: r["wall_s"])
        cpu = min(r["cpu_s"] for r in got)
        rows.append({"file": label, "tree": str(root), **best, "least_cpu_s": cpu})
    return rows


def trees_table(rows: list[dict]) -> str:
    head = "| file | tree | best wall | least CPU | RSS |\n|---|---|---:|---:|---:|\n"
    return (
        head
        + "\n".join(
            f"| {r['file']} | {r['tree']} | {r['wall_s']:.3f} s | {r['least_cpu_s']:.3f} s | "
            f"{r['rss_mb']:.0f} MB |"
            for r in rows
        )
        + "\n"
    )


def whole_table(rows: list[dict]) -> str:
    head = (
        "| file | events | size | `pickle.load` wall / CPU / RSS | memlens summary, compiled | "
        "time vs pickle.load (wall, CPU) | RSS vs pickle.load | memlens summary, Python path |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )

    def cell(r: dict, k: str) -> str:
        return (
            f"{r[k + '_wall_s']:.2f} s / {r[k + '_cpu_s']:.2f} s / {r[k + '_rss_mb'] / 1024:.2f} GB"
        )

    lines = [
        f"| {r['file']} | {r['events']:,} | {r['file_mb']:.0f} MB | {cell(r, 'pickle')} | "
        f"{cell(r, 'compiled')} | {r['compiled_wall_s'] / r['pickle_wall_s']:.3f}x, "
        f"{r['compiled_cpu_s'] / r['pickle_cpu_s']:.3f}x | "
        f"{r['compiled_rss_mb'] / r['pickle_rss_mb']:.2f}x | {cell(r, 'python')} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--whole", action="store_true", help="whole processes (issue 11)")
    ap.add_argument("--tiles", type=int, nargs="*", default=[50, 150])
    ap.add_argument("--tile-source", type=Path, default=TILE_SOURCE)
    ap.add_argument("--generated", type=int, nargs="*", default=[10_000_000])
    ap.add_argument(
        "--fresh", type=int, nargs="*", default=[50],
        help="tile counts to also time with a frames list per allocation, as PyTorch writes",
    )  # fmt: skip
    ap.add_argument(
        "--trees", type=Path, nargs="+",
        help="with --whole: time memlens summary from these source trees, interleaved",
    )  # fmt: skip
    a = ap.parse_args()
    if a.whole and a.trees:
        rows = []
        for n in a.tiles:
            rows += trees(ensure_tiled(a.tile_source, n), f"real x{n}", a.trees, a.repeat)
        print(json.dumps(rows, indent=1) if a.json else trees_table(rows))
        return
    if a.whole:
        files = [(ensure_tiled(a.tile_source, n), f"real x{n}") for n in a.tiles]
        files += [
            (ensure_fresh_stacks(ensure_tiled(a.tile_source, n)), f"real x{n}, list per alloc")
            for n in a.fresh
        ]
        files += [(ensure_snapshot(n), f"generated {n:,}") for n in a.generated]
        rows = []
        for path, label in files:
            print(f"benchmarking {label} ({path.name})...", file=sys.stderr)
            rows.append(whole(path, label, a.repeat))
        print(json.dumps(rows, indent=1) if a.json else whole_table(rows))
        return
    rows = []
    for n in a.sizes:
        print(f"benchmarking {n:,} events...", file=sys.stderr)
        rows.append(bench(n, a.repeat))
    print(json.dumps(rows, indent=1) if a.json else table(rows))


if __name__ == "__main__":
    main()

"""Benchmark every analysis on a generated 1M-event snapshot (warm column cache).

    python benchmarks/bench_analysis.py                  # 1M events, generated once
    python benchmarks/bench_analysis.py --events 100000
    python benchmarks/bench_analysis.py --snapshot /tmp/tiled.pickle   # any snapshot
    python benchmarks/bench_analysis.py --write          # also update docs/benchmarks-analysis.md

The snapshot is generated with memlens.generate_snapshot into benchmarks/data/ (git-ignored)
and opened once to fill the cache; every timing is then taken on a fresh warm open (the
cache is memory-mapped), best of --repeat runs. Interactive analyses (peak tree, live set,
stage table) have a 200 ms budget at 1M events; they are marked in the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
DOC = HERE.parent / "docs" / "benchmarks-analysis.md"
BUDGET_MS = 200.0
NOTES = """
Notes:

* The interactive analyses (peak tree, live set, memory at an allocation, stage table)
  stay under the 200 ms budget at 1M events. The generated file has 75,760 annotations
  (37,880 stages): pairing them is vectorized when they nest (the usual case), and what
  remains is mostly building one 26-key dict per stage. "Sites that grew" adds a grouping
  per stage (top > 0); `memlens stages` (text) and the report compute it only for the
  rows they show. Leaks find each step's survivors in one pass; the rest of its time is
  the stage table and the sites.
* Allocator state: traces without `segment_map`/`segment_unmap` use vectorized segment
  lifetimes (one mask per event asked). Expandable-segment traces use the backward walk
  over segment events only; forced on the tiled file it undoes 78,550 segment events in
  about 0.5 s on an idle machine (~6.5 µs each; the table's figure may include load from
  other jobs). The tiled file is not segment-consistent (the tiling tool repeats
  `segment_alloc`s without freeing), so only its timings are meaningful, not its states.
* Timings on a 2-CPU machine shared with other jobs vary by up to 2x between runs; the
  wall time includes waiting for the other jobs, the CPU time (process time, best of the
  runs) is what the analysis itself costs, and the 200 ms budget is judged on it.
"""


def ensure_snapshot(events: int) -> Path:
    import pickle

    import memlens

    path = DATA / f"gen_{events}.pickle"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        snap = memlens.generate_snapshot(events=events)
        with open(path, "wb") as f:
            pickle.dump(snap, f, protocol=4)
    return path


def cases(rules_path: str) -> list[tuple[str, bool, Callable[[Any], Any]]]:
    """(name, interactive, fn(dev)) — each fn is one public analysis call."""
    from memlens.analysis import (
        allocator_state,
        anomalies,
        budget,
        categories,
        diff,
        leaks,
        oom,
        peak,
        ranks,
        rules,
        sql,
        stages,
    )

    loaded_rules = rules.load_rules(rules_path)
    return [
        ("peak (tree + sites + largest)", True, lambda d: peak.peak(d)),
        ("live set at event n/2", True, lambda d: peak.live_set(d, d.n_events // 2)),
        ("live set, sites only (no tree)", True, lambda d: peak.live_set(d, d.n_events // 2, tree=False)),
        ("memory at an allocation (at its free)", True,
         lambda d: peak.memory_at_allocation(d, *freed_allocation(d), when="free")),
        ("stage table (no sites)", True, lambda d: stages.stage_table(d, top=0)),
        ("stage table + sites that grew", False, lambda d: stages.stage_table(d, top=3)),
        ("compare steps", False, lambda d: stages.compare_steps(d)),
        ("categories (+ curves)", False, lambda d: categories.categories(d)),
        ("compile contexts", False, lambda d: categories.by_compile_context(d)),
        ("rules (3 rules, + curves)", False, lambda d: rules.rules_analysis(d, loaded_rules)),
        ("diff (self vs self)", False, lambda d: diff.diff(d, d)),
        ("check budgets", False, lambda d: budget.check_budgets(d, max_peak=1 << 40)),
        ("leaks", False, lambda d: leaks.leaks(d)),
        ("anomalies", False, lambda d: anomalies.anomalies(d)),
        ("allocator state at the peak (blocks)", False,
         lambda d: allocator_state.state_at(d, d.peak_event_index)),
        ("allocator state at event 0 (longest walk)", False,
         lambda d: allocator_state.state_at(d, 0, blocks=False)),
        ("fragmentation (200 points)", False, lambda d: allocator_state.fragmentation(d)),
        # expandable-segment traces (segment_map/unmap) cannot use segment lifetimes:
        # this is the backward walk they use, forced, over every segment event
        ("segment walk to event -1 (expandable path)", False,
         lambda d: allocator_state.SegmentWalker(d).rewind_to(-1)),
        ("oom", False, lambda d: oom.oom_report(d)),
        ("ranks (one device)", False, lambda d: ranks.ranks([("x", d)])),
        ("sql: connect + group by action", False,
         lambda d: sql.query(d.snapshot, "select action, count(*) from events group by 1")),
    ]  # fmt: skip


def freed_allocation(dev: Any) -> tuple[int, int]:
    """(address, version) of the first allocation made after the middle of the trace and
    freed in it: what a user pastes into `memlens at` (about 1 ms to find at 1M events)."""
    import numpy as np

    rows = np.flatnonzero((dev.alloc_event >= dev.n_events // 2) & (dev.free_event < dev.n_events))
    r = int(rows[0])
    return int(dev.alloc_addr[r]), int(dev.alloc_version[r])


def bench(path: Path, repeat: int) -> str:
    """Time every case on `path`; print as it goes; return the Markdown section."""
    import memlens

    memlens.load(path)  # fill the cache
    t = time.perf_counter()
    snap = memlens.load(path)
    warm_ms = (time.perf_counter() - t) * 1e3
    dev = snap.device()
    n_seg = int(((dev.action >= 3) & (dev.action <= 6)).sum())  # segment_* actions
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write('{"optimizer": "optim", "forward": "forward", "backward": "Backward|backward"}')
        rules_path = f.name
    rows = []
    print(f"== {path.name}", flush=True)
    for name, interactive, fn in cases(rules_path):
        best = best_cpu = float("inf")
        for _ in range(repeat):
            d = memlens.load(path).device(dev.device)  # fresh object: no memoized indexes
            t, c = time.perf_counter(), time.process_time()
            fn(d)
            best = min(best, (time.perf_counter() - t) * 1e3)
            best_cpu = min(best_cpu, (time.process_time() - c) * 1e3)
        # judged on CPU time: on a shared machine the wall time also counts waiting for
        # other jobs' processes (both are recorded)
        ok = "" if not interactive else ("yes" if best_cpu <= BUDGET_MS else "**NO**")
        rows.append((name, interactive, best, best_cpu, ok))
        print(f"{name:45s} {best:9.1f} ms  {best_cpu:9.1f} ms cpu  {ok}", flush=True)
    os.unlink(rules_path)
    header = (
        f"### `{path.name}`\n\n{dev.n_events:,} events, {dev.n_allocations:,} allocations, "
        f"{n_seg:,} segment events, {len(snap.annotations):,} annotations, "
        f"{len(snap.stacks):,} distinct stacks, {len(snap.frames):,} frames; warm open "
        f"{warm_ms:.0f} ms."
    )
    table = ["| analysis | interactive (<= 200 ms CPU) | wall | CPU |", "|---|---|---:|---:|"]
    for name, interactive, best, best_cpu, ok in rows:
        table.append(
            f"| {name} | {ok if interactive else ''} | {best:,.1f} ms | {best_cpu:,.1f} ms |"
        )
    return header + "\n\n" + "\n".join(table) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--snapshot", action="append", default=[],
                    help="benchmark this file too (repeatable), e.g. a tiled real snapshot")  # fmt: skip
    ap.add_argument("--no-generated", action="store_true", help="only the --snapshot files")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="write docs/benchmarks-analysis.md")
    args = ap.parse_args()

    os.environ.setdefault("MEMLENS_CACHE_DIR", str(DATA / "cache"))
    paths = [] if args.no_generated else [ensure_snapshot(args.events)]
    paths += [Path(p) for p in args.snapshot]
    sections = [bench(p, args.repeat) for p in paths]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    text = (
        f"Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs "
        f"(load average {load:.1f} at the end: shared with other jobs). Best of {args.repeat}, "
        "each on a freshly opened snapshot (warm column cache).\n\n" + "\n".join(sections)
    )
    print()
    print(text)
    if args.write:
        DOC.write_text(
            "# Analysis benchmarks\n\n"
            "Produced by `python benchmarks/bench_analysis.py --write` (see its docstring); the\n"
            "tiled file is `python ../shared/tools/tile_snapshot.py "
            "cs336_memory_ctx256_fullstep.pickle /tmp/tiled_ctx256_x50.pickle -n 50`\n"
            "(real stacks, 50 repetitions of a training step) passed with `--snapshot`.\n\n"
            + text
            + NOTES
        )
        print(f"wrote {DOC}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""Fuzzing the compiled reader: mutated snapshots end in exit 0 or 2, never a signal, and
never take more than twice the file size in memory (plus a constant).

Mutations (see fuzz_mutations.py) of generated snapshots (protocols 2-5, gzip, several
devices, oom, expandable segments, unknown fields) and, when ../shared/snapshots is
there, of a real one, run in worker processes in batches; a batch that dies is re-run one
case per process to name the culprit. The default run is MEMLENS_FUZZ_CASES=2000 cases
(well under a minute); set MEMLENS_FUZZ_CASES=10000 (or more) for the full run.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from memlens.simulation.synthetic import generate_trace_dict
from memlens.snapshot.read import compiled

pytestmark = pytest.mark.skipif(not compiled.available(), reason="compiled reader not built")

HERE = Path(__file__).resolve().parent
WORKER = HERE / "fuzz_mutations.py"
BATCH = 250
# On top of 2x the file: the memo table a small file may ask for (the 'memo' limit's floor
# is a million entries, 8 MB) and the columns and tables of the snapshot.
MEMORY_SLACK = 16 << 20
REAL_BASE = "wedson_medium_128_inference.pickle"


def _bases(tmp: Path) -> list[Path]:
    out = []
    variants: list[tuple[dict[str, Any], int]] = [
        ({"events": 300, "seed": 11}, 4),
        ({"events": 250, "devices": 2, "seed": 12}, 2),
        ({"events": 250, "oom": True, "expandable": True, "seed": 13}, 5),
        ({"events": 250, "truncate": 60, "seed": 14}, 3),
    ]
    for i, (options, protocol) in enumerate(variants):
        snap = generate_trace_dict(**options)
        if i == 0:  # fields and actions the reader keeps going past
            snap["device_traces"][0][2]["mystery_field"] = [1, 2]
            snap["device_traces"][0][4]["action"] = "annotate"
            snap["device_traces"][0][5]["compile_context"] = "Torch-Compiled Region: 0/1"
            forward = ["  File a.py, line 1\n", "    f()\n"]  # joined by the reader
            for k in (6, 7, 9):
                snap["device_traces"][0][k]["forward_frames"] = forward
            snap["device_traces"][0][8]["forward_frames"] = []
        path = tmp / f"gen{i}.pickle"
        path.write_bytes(pickle.dumps(snap, protocol=protocol))
        out.append(path)
    gz = tmp / "gen0.pickle.gz"
    gz.write_bytes(gzip.compress(out[0].read_bytes()))
    out.append(gz)
    from shared_data import SHARED_SNAPSHOTS

    real = SHARED_SNAPSHOTS / REAL_BASE
    if real.exists():
        out.append(real)
    return out


def _run(bases_json: Path, first: int, count: int) -> tuple[int, list[dict[str, Any]]]:
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MEMLENS_NO_CACHE": "1"}
    env.pop(compiled.READER_ENV, None)
    proc = subprocess.run(
        [sys.executable, str(WORKER), str(bases_json), str(first), str(count)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    return proc.returncode, lines


def test_fuzz_compiled_reader(tmp_path):
    total = int(os.environ.get("MEMLENS_FUZZ_CASES", "2000"))
    bases = _bases(tmp_path)
    bases_json = tmp_path / "bases.json"
    bases_json.write_text(json.dumps([str(b) for b in bases]))
    batches = [(first, min(BATCH, total - first)) for first in range(0, total, BATCH)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda b: (b, *_run(bases_json, *b)), batches))

    cases: dict[int, dict[str, Any]] = {}
    died: list[str] = []
    for (first, count), rc, lines in results:
        for line in lines:
            cases[line["case"]] = line
        if rc != 0 or len(cases.keys() & set(range(first, first + count))) != count:
            for case in range(first, first + count):  # one by one, to name the culprit
                rc1, lines1 = _run(bases_json, case, 1)
                if rc1 != 0 or not lines1:
                    died.append(f"case {case}: worker exit {rc1} (signal {-rc1})")
                else:
                    cases[case] = lines1[0]

    assert not died, died
    assert len(cases) == total
    bad = [c for c in cases.values() if c["outcome"] not in ("0", "2")]
    assert not bad, bad[:10]
    by_compiled = [c for c in cases.values() if c["reader"] == "compiled"]
    assert len(by_compiled) > total // 2  # most mutations are read (and refused) in C
    if all(c["growth"] >= 0 for c in cases.values()):  # peak RSS measurable per case
        heavy = [c for c in by_compiled if c["growth"] > 2 * c["size"] + MEMORY_SLACK]
        assert not heavy, heavy[:5]
    # a mutation may cut a file to nothing (refused before either reader runs)
    ratio = [(c["growth"] - MEMORY_SLACK) / max(c["size"], 1) for c in by_compiled]
    report = {
        "cases": total,
        "outcomes": dict(Counter(c["outcome"] for c in cases.values())),
        "reader": dict(Counter(c["reader"] for c in cases.values())),
        "kinds": dict(Counter(c["how"].split()[0] for c in cases.values())),
        "compiled_max_growth_mb": max(c["growth"] for c in by_compiled) / 2**20,
        "compiled_max_growth_over_slack_per_file_byte": max(ratio),
        "python_path_max_growth_mb": max(
            (c["growth"] for c in cases.values() if c["reader"] == "python"), default=0
        )
        / 2**20,
    }
    print(json.dumps(report))

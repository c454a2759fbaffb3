"""GPU ground truth committed under tests/data/gpu/<run>/: what benchmarks/gpu_truth/run.sh
brought back from a real card (gpu_truth.json and the real-*.pickle.gz recordings out of its
recordings-N.tar), read for the tests that hold `memlens simulate` to it.

There is none yet: every test built on it skips until a run is committed (see
benchmarks/gpu_truth/README.md, "After a GPU run").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shared_data import REPO_ROOT

# MEMLENS_GPU_DATA: try a run's folder before committing it
GPU_DATA = Path(os.environ.get("MEMLENS_GPU_DATA", REPO_ROOT / "tests" / "data" / "gpu"))
GPU_TRUTH = REPO_ROOT / "benchmarks" / "gpu_truth"
TOLERANCE = 0.02  # peak active and peak reserved, simulated against real
HELD = ("peak_active", "peak_reserved")

# case name -> why its simulation is not held to 2% (each reason is also written up in
# docs/benchmarks-simulate.md, "Ground truth from a GPU"). Fill in after a GPU run.
EXPLAINED: dict[str, str] = {
    "llama_compile": "torch.compile: Inductor's buffers are modelled, not generated; Triton "
    "autotuning's benchmark buffers only where the simulation can tell a kernel's configs, "
    "and each `torch.autocast` inside the model is a graph break in the simulation only "
    "(docs/simulation.md, torch.compile)",
}


@dataclass(frozen=True)
class TruthCase:
    run: Path  # tests/data/gpu/<run>
    name: str
    row: dict[str, Any]  # the case's row of gpu_truth.json
    machine: dict[str, Any]

    @property
    def id(self) -> str:
        return f"{self.run.name}:{self.name}"

    def figures(self, side: str) -> dict[str, Any] | None:
        figures: dict[str, Any] | None = self.row.get(side, {}).get("figures")
        return figures

    def recording(self, side: str) -> Path | None:
        name = self.row.get(side, {}).get("recording")
        path = self.run / name if name else None
        return path if path is not None and path.is_file() else None


def truth_cases() -> list[TruthCase]:
    """Every case of every committed run whose real side recorded a snapshot."""
    out = []
    for table in sorted(GPU_DATA.glob("*/gpu_truth.json")):
        data = json.loads(table.read_text())
        if data.get("fake"):
            continue
        for name, row in data.get("cases", {}).items():
            if row.get("real", {}).get("figures"):
                out.append(TruthCase(table.parent, name, row, data.get("machine", {})))
    return out


def relative_error(sim: int, real: int) -> float:
    return abs(sim - real) / real if real else float(sim != 0)


def off_by_more(sim: dict[str, Any], real: dict[str, Any]) -> dict[str, str]:
    """The held figures that differ by more than TOLERANCE, with both values."""
    return {
        key: f"simulated {sim[key]:,} vs real {real[key]:,} bytes"
        for key in HELD
        if relative_error(sim[key], real[key]) > TOLERANCE
    }


def resimulate(case: TruthCase, folder: Path) -> Path | None:
    """Simulate the case here, with today's simulator, exactly as run.sh did on the GPU
    machine (same script, arguments, --gpu and --device-memory); the compared file."""
    sys.path.insert(0, str(GPU_TRUTH))
    import truth_cases

    spec = next(c for c in truth_cases.CASES if c.name == case.name)
    gpu = case.machine.get("simulate_gpu", "h100")
    memory = case.machine.get("simulate_device_memory")
    argv, cwd = truth_cases.sim_command(spec, False, folder, gpu, memory)
    env = truth_cases.case_env(spec, _env())
    subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=900)
    found: Path | None = truth_cases.find_snapshot(spec, folder)
    return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT / "src")
    env["HF_HUB_OFFLINE"] = "1"
    return env

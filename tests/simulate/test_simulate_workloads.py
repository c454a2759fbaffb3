"""A third-party training script simulated unedited against its own GPU recordings.

../shared/workloads/cs336_medium holds the script (and its nvtx-annotated newer version)
that recorded ../shared/snapshots/wedson_medium_128_{training,inference}.pickle on a
pre-Hopper GPU. Run as its README says (from cs336_systems/, cs336_basics importable),
with `--gpu a100`; the snapshot the script dumps itself is compared with the real one:
peak and reserved within 1 %, trace entries within 5 % (issue 13).

Cost (2-core machine): each forward-only run takes about 7 s of CPU, the training run
about 35 s of CPU (95 s wall on a busy machine): the two forward-only runs are in the
default suite (marked slow), the training run only with MEMLENS_SLOW_SIMULATIONS=1 (scripts/test.sh, and so CI, sets it).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
for needed in ("einops", "einx", "jaxtyping"):  # the script's own dependencies
    pytest.importorskip(needed)

import memlens  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WORKLOAD = Path(__file__).resolve().parents[2].parent / "shared" / "workloads" / "cs336_medium"
MODEL = "--context_length 128 --d_model 1024 --d_ff 4096 --num_layers 24 --num_heads 16"
OPT_IN = pytest.mark.skipif(
    not os.environ.get("MEMLENS_SLOW_SIMULATIONS"),
    reason="the training simulation takes ~35 s CPU: set MEMLENS_SLOW_SIMULATIONS=1",
)
TRAINING = ("nsys_profile.py", "full-training-step", "--memory-profile true")
CASES = {
    # (script, pattern, profiling flag): recording
    TRAINING: "training",
    ("nsys_profile.py", "forward-only", "--memory-profile true"): "inference",
    ("nsys_profile_annotated.py", "forward-only", "--memory-profiler pytorch"): "inference",
}


@pytest.fixture(scope="module")
def workload(tmp_path_factory: pytest.TempPathFactory, shared_snapshots_dir: Path) -> Path:
    if not WORKLOAD.is_dir():
        pytest.skip("../shared/workloads/cs336_medium is absent")
    root = tmp_path_factory.mktemp("wedson")
    shutil.copytree(WORKLOAD / "cs336_basics", root / "cs336_basics")
    (root / "cs336_systems").mkdir()
    for script in ("nsys_profile.py", "nsys_profile_annotated.py"):
        shutil.copy(WORKLOAD / script, root / "cs336_systems" / script)
    return root


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=OPT_IN) if c == TRAINING else c for c in CASES],
    ids=lambda c: f"{c[0]}-{c[1]}",
)
def test_the_unedited_script_matches_its_gpu_recording(
    case, workload, shared_snapshots_dir, monkeypatch
):
    script, pattern, flag = case
    kind = CASES[case]
    monkeypatch.chdir(workload / "cs336_systems")
    monkeypatch.syspath_prepend(str(workload))  # PYTHONPATH=.. in the README
    args = [*MODEL.split(), "--model_name", "sim", *flag.split(), "--pattern", pattern]
    run = run_script(script, args, workload / "out.pickle", gpu="a100")
    own = workload / "results" / f"sim_128_{kind}_memory_snapshot.pickle"
    assert run.own_dump and run.sim.dumps[-1].resolve() == own.resolve()
    sim = memlens.load(run.snapshot).device(0)
    real = memlens.load(shared_snapshots_dir / f"wedson_medium_128_{kind}.pickle").device(0)
    for figure in ("peak_active_bytes", "peak_reserved_bytes", "end_reserved_bytes"):
        assert getattr(sim, figure) == pytest.approx(getattr(real, figure), rel=0.01), figure
    assert sim.n_events == pytest.approx(real.n_events, rel=0.05)
    if script == "nsys_profile_annotated.py":  # one nvtx range per layer
        names = {a["name"] for a in run.snapshot["external_annotations"]}
        assert {f"layer_{i:02d}" for i in range(24)} <= names

"""`memlens plan` on the shared third-party cs336 script (../shared/workloads/cs336_medium),
forward-only as the issue names it: the 128 point of a context-length sweep equals the
GPU recording wedson_medium_128_inference.pickle to the byte. The training points equal
wedson_medium_128_training the same way (docs/plan.md); they cost ~35 s of CPU each and
are left to the simulate workload tests. Cost here: two forward-only runs, ~7 s CPU each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
for needed in ("einops", "einx", "jaxtyping"):  # the script's own dependencies
    pytest.importorskip(needed)

import memlens  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

WORKLOAD = Path(__file__).resolve().parents[2].parent / "shared" / "workloads" / "cs336_medium"
MODEL = "--d_model 1024 --d_ff 4096 --num_layers 24 --num_heads 16 --model_name medium"


def test_forward_only_sweep_matches_the_recording(tmp_path, shared_snapshots_dir):
    if not WORKLOAD.is_dir():
        pytest.skip("../shared/workloads/cs336_medium is absent")
    shutil.copytree(WORKLOAD / "cs336_basics", tmp_path / "cs336_basics")
    (tmp_path / "cs336_systems").mkdir()
    shutil.copy(WORKLOAD / "nsys_profile.py", tmp_path / "cs336_systems")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": path}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "plan", "--json", "--gpu", "a100", "--jobs", "2",
         "--sweep", "--context_length=128,256", "nsys_profile.py", *MODEL.split(),
         "--memory-profile", "true", "--pattern", "forward-only"],
        capture_output=True, text=True, cwd=tmp_path / "cs336_systems", env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    p128, p256 = json.loads(done.stdout)["points"]
    real = memlens.load(shared_snapshots_dir / "wedson_medium_128_inference.pickle").device(0)
    assert (p128["peak_active_bytes"], p128["peak_reserved_bytes"]) == (
        real.peak_active_bytes, real.peak_reserved_bytes)  # fmt: skip
    assert (p128["peak_active_bytes"], p128["peak_reserved_bytes"]) == (1736962048, 1763704832)
    # longer context, more memory (the 256 recording is kept aside, not in ../shared)
    assert p256["peak_active_bytes"] > p128["peak_active_bytes"]

"""`memlens ARGS` in a subprocess for the what-if tests: in `tmp_path`, with a cache of its
own and no inherited PYTORCH_CUDA_ALLOC_CONF; its stdout, after checking it exited 0."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def memlens_in(tmp_path: Path, *args: str) -> str:
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    done = subprocess.run([sys.executable, "-m", "memlens", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout

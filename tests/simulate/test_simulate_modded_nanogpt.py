"""modded-nanogpt's 2024-12-10 record (github.com/KellerJordan/modded-nanogpt, MIT), a
third-party compiled training script, simulated unedited against the peak its own run
printed on a GPU (issue 36).

Opt-in and long (about 40 minutes of one CPU: 1,480 steps and twelve evaluations of a
65,536-token sequence through a compiled 12-layer GPT with FlexAttention): point
MEMLENS_MODDED_NANOGPT_DIR at the directory scripts/fetch_modded_nanogpt.sh makes, which
holds the record's script (train_gpt.py, extracted from its log) and the log itself
(record.txt). The record ran on 8 H100s with torch 2.6.0.dev20241203; the log's last line
is rank 0's `torch.cuda.max_memory_allocated()`, 34,239 MiB.

The script runs as written (`torchrun --nproc_per_node=8 train_gpt.py`): compiled model
wrapped in DDP, FlexAttention with a document-causal sliding-window block mask, Muon
(compiled Newton-Schulz, all_gather of the updates) and three fused Adams, bf16
embeddings, `torch.compiler.set_stance`, a checkpoint at the end. What the machine lacks
the test provides, as a user would: the data (random tokens in the record's .bin format:
header, then uint16), and an `nvidia-smi` stand-in on PATH (the script logs its output).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

pytestmark = [pytest.mark.torch, pytest.mark.slow]

SOURCE = os.environ.get("MEMLENS_MODDED_NANOGPT_DIR", "")
if not SOURCE:
    pytest.skip(
        "set MEMLENS_MODDED_NANOGPT_DIR (scripts/fetch_modded_nanogpt.sh makes it)",
        allow_module_level=True,
    )

PEAK = re.compile(r"^peak memory consumption: (\d+) MiB$", re.MULTILINE)
# torch 2.13's Inductor and FlexAttention kernels against the record's 2.6 nightly: the
# simulated peak is within this fraction of the GPU's (measured: see docs/simulation.md)
TOLERANCE = 0.01


def write_shard(path: Path, n: int, seed: int) -> None:
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (20240520, 1, n)
    tokens = np.random.default_rng(seed).integers(0, 50257, n, dtype=np.uint16)
    path.write_bytes(header.tobytes() + tokens.tobytes())


def test_the_record_runs_unedited_and_peaks_as_on_its_gpus(tmp_path):
    source = Path(SOURCE)
    truth = int(PEAK.findall((source / "record.txt").read_text())[-1])
    shutil.copy(source / "train_gpt.py", tmp_path / "train_gpt.py")
    data = tmp_path / "data" / "fineweb10B"
    data.mkdir(parents=True)
    # a shard must hold 8 x 65,536 + 1 tokens; the loader cycles through the files
    write_shard(data / "fineweb_train_000001.bin", 1_200_000, seed=1)
    write_shard(data / "fineweb_val_000000.bin", 1_200_000, seed=2)
    (tmp_path / "logs").mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'nvidia-smi stand-in (no GPU)'\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "--nproc-per-node", "8",
         "--ranks", "0", "-o", "sim", "train_gpt.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=4 * 3600,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert "ran eagerly" not in done.stderr
    logs = list((tmp_path / "logs").glob("*.txt"))
    assert len(logs) == 1
    log = logs[0].read_text()
    assert "step:1480/1480 val_loss:" in log  # every step and the last evaluation ran
    simulated = int(PEAK.findall(log)[-1])
    assert abs(simulated - truth) <= TOLERANCE * truth, (simulated, truth)

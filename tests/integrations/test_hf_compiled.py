"""The transformers Trainer with `torch_compile=True` and bf16 under `memlens simulate`
(issue 36): the model compiles as one graph (no graph break the simulation adds, none
run eagerly: SDPA inside the graph, autocast applied in the AOT trace), and the run ends
holding what the eager run holds, to the byte (the parameters, AdamW's state, the
workspaces). Each run is a fresh `memlens simulate` process, as a user runs it: in one
interpreter after other tests, compiler state they leave behind (Dynamo's and Inductor's
process-wide caches) made the compiled run's end differ by a quarter MiB in one order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("torch")

import memlens  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
SCRIPT = """
import json, sys
import torch
from torch._dynamo.utils import counters
from transformers import Trainer, TrainingArguments
from integration_models import Tokens, tiny_llama

args = TrainingArguments(
    output_dir="out", per_device_train_batch_size=4, max_steps=3, report_to="none",
    save_strategy="no", disable_tqdm=True, dataloader_pin_memory=False, bf16=True,
    torch_compile=sys.argv[1] == "compiled",
)
Trainer(model=tiny_llama(), args=args, train_dataset=Tokens()).train()
print("COUNTERS " + json.dumps({
    "graph_breaks": sum(counters["graph_break"].values()),
    "graphs": counters["stats"]["unique_graphs"],
}))
"""


def run(root: Path, kind: str) -> tuple[dict[str, int], str, int]:
    out = root / f"{kind}.pickle"
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "--cublas-workspace", "8MiB",
         "-o", str(out), "train.py", kind],
        capture_output=True, text=True, cwd=root, timeout=600,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("COUNTERS "))
    end = memlens.load(out).device(0).end_active_bytes
    return json.loads(line.removeprefix("COUNTERS ")), done.stderr, end


def test_a_compiled_trainer_is_one_graph_and_ends_as_the_eager_one(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    counts, notes, compiled_end = run(tmp_path, "compiled")
    assert counts == {"graph_breaks": 0, "graphs": 1}
    assert "ran eagerly" not in notes and "note: torch.compile" in notes
    _, _, eager_end = run(tmp_path, "eager")
    assert compiled_end == eager_end

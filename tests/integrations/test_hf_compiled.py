"""The transformers Trainer with `torch_compile=True` and bf16, on fake CUDA (issue 36):
the model compiles as one graph (no graph break the simulation adds, none run eagerly:
SDPA inside the graph, autocast applied in the AOT trace), and the run ends holding what
the eager run holds, to the byte (the parameters, AdamW's state, the workspaces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")
pytest.importorskip("accelerate")
torch = pytest.importorskip("torch")

from integration_models import Tokens, tiny_llama  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402
from transformers import Trainer, TrainingArguments  # noqa: E402

import memlens  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.slow]


def run(output_dir: Path, compiled: bool) -> tuple[Any, Any]:
    with memlens.simulate(cublas_workspace="8MiB") as sim:
        args = TrainingArguments(
            output_dir=str(output_dir),
            per_device_train_batch_size=4,
            max_steps=3,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            dataloader_pin_memory=False,
            bf16=True,  # made inside the simulation: bf16 needs a CUDA device
            torch_compile=compiled,
        )
        Trainer(model=tiny_llama(), args=args, train_dataset=Tokens()).train()
    return sim, memlens.load(sim.snapshot or sim.build_snapshot()).device(0)


def test_a_compiled_trainer_is_one_graph_and_ends_as_the_eager_one(tmp_path):
    counters.clear()
    sim, compiled = run(tmp_path / "compiled", compiled=True)
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1
    assert not [n for n in sim.notes if "ran eagerly" in n]
    assert any(n.startswith("torch.compile") for n in sim.notes)
    _, eager = run(tmp_path / "eager", compiled=False)
    assert compiled.end_active_bytes == eager.end_active_bytes

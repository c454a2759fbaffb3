"""`torch.where(mask, x, scalar)` makes its scalar a 0-dim tensor on x's device
(`wrapped_scalar_tensor(other, self.device())` in the composite `where.ScalarOther`): on
a GPU that is a 4-byte block from the caching allocator, taken before the output and
freed when the composite returns. The cs336 script's causal mask
(`torch.where(mask, attention_scores, float("-inf"))`) does it once per layer; the
H200 recording (tests/data/gpu/2026-11-28-h200) has the exact events."""

from __future__ import annotations

import gzip
import pickle
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "gpu" / "2026-11-28-h200"
SCORES = (4, 16, 384, 384)  # batch, heads, context, context (fp32: 37,748,736 B)


def _recorded_where() -> list[tuple[str, int]]:
    """The recording's events from the first forward `where`'s scalar to its free."""
    with gzip.open(DATA / "cs336_medium_384_training.pickle.gz") as f:
        trace = pickle.load(f)["device_traces"][0]

    def names(e: dict[str, Any]) -> str:
        return " ".join(fr["name"] for fr in e["frames"])

    start = next(
        i for i, e in enumerate(trace) if e["action"] == "alloc" and "scalar_tensor" in names(e)
    )
    end = next(
        i for i in range(start, len(trace))
        if trace[i]["action"] == "free_completed" and trace[i]["addr"] == trace[start]["addr"]
    )  # fmt: skip
    return [(e["action"], e["size"]) for e in trace[start : end + 1]]


def _simulated_where(requires_grad: bool) -> list[tuple[str, int]]:
    with memlens.simulate(cublas_workspace=0) as sim:
        scores = torch.empty(SCORES, device="cuda", requires_grad=requires_grad)
        mask = torch.ones(SCORES[-2:], dtype=torch.bool, device="cuda")
        start = len(sim.allocator.trace)
        masked = torch.where(mask, scores, float("-inf"))
        # the recording's segments were all made before it: compare blocks only
        events = [
            (e["action"], e["size"])
            for e in sim.allocator.trace[start:]
            if e["action"] != "segment_alloc"
        ]
        assert masked.device == torch.device("cuda", 0)
    return events


@pytest.mark.parametrize("requires_grad", [True, False])
def test_where_with_a_scalar_takes_the_h200_recordings_blocks(requires_grad):
    recorded = _recorded_where()
    assert recorded == [
        ("alloc", 4),  # scalar_tensor(-inf) on the device, float32 like the scores
        ("alloc", 4 * 16 * 384 * 384 * 4),  # the output
        ("free_requested", 4),
        ("free_completed", 4),
    ]
    assert _simulated_where(requires_grad) == recorded


def test_a_cpu_scalar_tensor_made_in_python_stays_on_the_host():
    with memlens.simulate(cublas_workspace=0) as sim:
        x = torch.empty(8, device="cuda")
        start = len(sim.allocator.trace)
        host = torch.scalar_tensor(2.0)
        y = torch.where(x > 0, x, host)  # a CPU 0-dim tensor is a scalar to CUDA kernels
        assert host.device.type == "cpu" and y.device.type == "cuda"
        events = [(e["action"], e["size"]) for e in sim.allocator.trace[start:]]
    assert events == [("alloc", 8), ("alloc", 32), ("free_requested", 8), ("free_completed", 8)]

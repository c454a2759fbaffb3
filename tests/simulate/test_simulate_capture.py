"""What memlens's own capture layer and the trainers need from a simulation: history state
as torch reports it, the OOM observer, scalar tensors on the device, CPU values."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.capture import oom  # noqa: E402
from memlens.simulation import session  # noqa: E402

MiB = 2**20
HISTORY_ENABLED = getattr(torch._C, "_cuda_isHistoryEnabled", None)  # before any simulation


def sizes(snapshot: dict[str, Any]) -> list[int]:
    return [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "alloc"]


def test_history_is_off_until_the_code_switches_it_on_and_reenabling_keeps_it():
    with memlens.simulate(cublas_workspace=0) as sim:
        assert torch._C._cuda_isHistoryEnabled() is False  # the whole-run recording
        torch.empty(1000, device="cuda")
        torch.cuda.memory._record_memory_history()
        assert torch._C._cuda_isHistoryEnabled() is True
        torch.empty(2000, device="cuda")
        torch.cuda.memory._record_memory_history()  # on again: history kept, as on a GPU
        torch.empty(3000, device="cuda")
        kept = sizes(torch.cuda.memory._snapshot())
        torch.cuda.memory._record_memory_history(clear_history=True)
        torch.empty(4000, device="cuda")
        cleared = sizes(torch.cuda.memory._snapshot())
        torch.cuda.memory._record_memory_history(enabled=None)
        assert torch._C._cuda_isHistoryEnabled() is False
    assert kept == [8000, 12000] and cleared == [16000]
    assert sim.snapshot is not None
    assert sizes(sim.snapshot) == [16000]
    # restored on exit: absent in a CPU build, the CUDA build's own in a CUDA one
    assert getattr(torch._C, "_cuda_isHistoryEnabled", None) is HISTORY_ENABLED


def test_memlens_record_runs_inside_a_simulation(tmp_path):
    out = tmp_path / "step.pickle"
    with memlens.simulate(cublas_workspace=0):
        torch.empty(1000, device="cuda")
        with memlens.record(out, report=False), memlens.stage("work"):
            torch.empty(2000, device="cuda")
    snap = pickle.loads(out.read_bytes())
    assert sizes(snap) == [8000]
    assert [(a["name"], a["stage"]) for a in snap["external_annotations"]] == [
        ("work", "START"),
        ("work", "END"),
    ]


def test_oom_observers_hear_the_simulated_oom_before_the_error(tmp_path):
    heard: list[tuple[int, int, int, int]] = []
    observer = heard.append
    try:
        with memlens.simulate(device_memory="64MiB", cublas_workspace=0):
            torch._C._cuda_attach_out_of_memory_observer(lambda *a: observer(a))
            with memlens.dump_on_oom(tmp_path) as dumper:
                keep = torch.empty(10 * MiB // 4, device="cuda")
                with pytest.raises(torch.OutOfMemoryError):
                    torch.empty(100 * MiB // 4, device="cuda")
                del keep
    finally:
        # observers live as long as the process, as torch's do; drop the test's own
        session._oom_observers.clear()
        oom._reset_for_tests()
    assert heard == [(0, 100 * MiB, 64 * MiB, 54 * MiB)]  # device, size, total, free
    (path,) = dumper.paths
    assert pickle.loads(path.read_bytes())["device_traces"][0][-1]["action"] == "oom"


def test_scalar_tensors_on_the_device_and_values_of_cpu_tensors():
    torch.manual_seed(7)
    drawn = torch.empty((), dtype=torch.int64).random_().item()
    with memlens.simulate(cublas_workspace=0) as sim:
        zero = torch.tensor(0.0, device=torch.device("cuda", 0))  # HF Trainer's loss total
        assert zero.is_cuda
        torch.manual_seed(7)
        # DataLoader's seed: drawn on the host for real, as on a GPU machine (values.py)
        seed = torch.empty((), dtype=torch.int64).random_().item()
        assert seed == drawn
        assert torch.tensor(3.5).item() == 3.5  # a constant the fake mode knows keeps it
    assert sim.snapshot is not None
    assert sizes(sim.snapshot) == [4]


def test_a_module_moves_to_cpu_and_back_even_while_its_graph_holds_the_weights():
    with memlens.simulate(cublas_workspace=0):
        m = torch.nn.Linear(8, 8).cuda()
        out = m(torch.randn(4, 8, device="cuda", requires_grad=True))
        # The graph holds the weight, so the fake parameters cannot be swapped; `.data` is
        # assigned instead, as a GPU build does (Lightning's teardown after an OOM).
        m.cpu()
        assert m.weight.device.type == "cpu" and not m.weight.is_cuda
        del out
        assert torch.cuda.memory_allocated() == 0  # the CUDA copies were freed
        m.cuda()
        assert m.weight.is_cuda and torch.cuda.memory_allocated() == 1024  # 2 x 512 B blocks
        assert torch.randn(3, device="cuda").cpu().device.type == "cpu"

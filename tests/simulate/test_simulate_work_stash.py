"""A collective's `Work` keeps its tensors until `wait()`, as ProcessGroupNCCL's stash
does (simulation/distributed/collectives.py): exact bytes on fp32 tensors of 1,024
elements (4,096 bytes, a multiple of 512: no rounding), rank 1 of 2."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import gzip  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.distributed.env import World  # noqa: E402

SCRIPT = """
import json, sys, torch, torch.distributed as dist
dist.init_process_group("nccl")
world = dist.get_world_size()
marks = {}
base = torch.cuda.memory_allocated()
def mark(name):
    marks[name] = torch.cuda.memory_allocated() - base

t = torch.empty(1024, device="cuda")
w = dist.all_reduce(t, async_op=True)
del t
mark("all_reduce dropped")
w.wait()
mark("all_reduce waited")  # the Work's future still holds its output, as WorkNCCL's outputs_
del w
mark("all_reduce work dropped")

out = torch.empty(world * 1024, device="cuda")
inp = torch.empty(1024, device="cuda")
w = dist.all_gather_into_tensor(out, inp, async_op=True)
del inp
mark("all_gather dropped")
dist.barrier()  # another collective: the script still holds the Work
mark("all_gather held")
w.wait()
mark("all_gather waited")
del w
dist.all_gather_into_tensor(out, torch.empty(1024, device="cuda"))
mark("all_gather synchronous")

w = dist.all_gather_into_tensor(out, torch.empty(1024, device="cuda"), async_op=True)
del w  # never waited: kept until the next call into the group
mark("not waited")
dist.all_reduce(out)
mark("next collective")
json.dump(marks, open(sys.argv[1], "w"))
"""


def marks_of_rank1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    (tmp_path / "work.py").write_text(SCRIPT)
    for key, value in World(nproc_per_node=2).env(1).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "m.json"
    run_script(tmp_path / "work.py", [str(out)], tmp_path / "s.pickle", cublas_workspace=0)
    marks: dict[str, Any] = json.loads(out.read_text())
    return marks


def test_work_keeps_its_tensors_until_wait(tmp_path, monkeypatch):
    marks = marks_of_rank1(tmp_path, monkeypatch)
    out = 2 * 4096
    assert marks == {
        "all_reduce dropped": 4096,
        "all_reduce waited": 4096,
        "all_reduce work dropped": 0,
        "all_gather dropped": out + 4096,
        "all_gather held": out + 4096,
        "all_gather waited": out,
        "all_gather synchronous": out,
        "not waited": out + 4096,
        "next collective": out,
    }


GPU = Path(__file__).parents[1] / "data" / "gpu"


def test_the_h200_recording_of_async_collectives_is_reproduced_event_for_event(
    tmp_path, monkeypatch
):
    """tests/data/gpu/work_wait.pickle.gz (NCCL on an H200, world 1): all_reduce's input is
    freed when its Work is dropped, all_gather_into_tensor's input at its wait()."""
    monkeypatch.chdir(GPU / "scripts")  # the script imports its recording helper
    monkeypatch.syspath_prepend(str(GPU / "scripts"))
    script = tmp_path / "own.pickle"
    run_script(GPU / "scripts" / "work_wait.py", [str(script)], tmp_path / "s.pickle", gpu="h100")
    recorded = pickle.loads(gzip.decompress((GPU / "work_wait.pickle.gz").read_bytes()))
    simulated = pickle.loads(script.read_bytes())

    def events(snapshot: dict[str, Any]) -> list[tuple[str, int]]:
        return [(e["action"], e["size"]) for e in snapshot["device_traces"][0]]

    assert events(simulated) == events(recorded)

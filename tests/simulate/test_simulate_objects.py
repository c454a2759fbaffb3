"""Object collectives carry real objects between the launcher's rank processes
(memlens.simulation.distributed.objects), and `torch.cuda.nccl.version()` answers.

Before, the fake process group moved no data and `.item()` answered 0 for the objects'
sizes: every receiver unpickled nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.distributed.env import World  # noqa: E402

SCRIPT = str(Path(__file__).with_name("objects_script.py"))


def test_two_rank_processes_exchange_objects_through_the_launcher(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "--nproc-per-node", "2", "--workers",
         "2", "--cublas-workspace", "0", "-o", "job", SCRIPT, "got{rank}.json"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = [json.loads((tmp_path / f"got{r}.json").read_text()) for r in (0, 1)]
    for rank in (0, 1):
        assert got[rank]["nccl"] == [2, 30, 7]
        assert got[rank]["broadcast"] == {"from": 0, "layers": 4}
        assert got[rank]["all_gather"] == ["rank0", "rank1"]
    # the tensor is made anew in the receiving process, on the device it was sent from
    # (unpickling restores a CUDA tensor's device, as on a GPU): 64 bytes, one block
    assert got[1]["received"] == [[4, 8], "torch.bfloat16", "cuda:0"]
    assert got[1]["allocated"] == 512
    assert not (tmp_path / "job" / ".rendezvous").exists()  # removed after the job


def test_a_rank_without_peers_assumes_they_hold_its_own_objects(tmp_path, monkeypatch):
    for key, value in World(2).env(1).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "got{rank}.json"
    run = run_script(SCRIPT, [str(out)], tmp_path / "r.pickle", cublas_workspace=0)
    got = json.loads((tmp_path / "got1.json").read_text())
    assert got["broadcast"] is None  # its own list, unchanged
    assert got["all_gather"] == ["rank1", "rank1"]
    assert got["received"] is None
    assert any("object collectives" in note for note in run.notes)


def test_a_peer_file_naming_code_is_refused():
    """What a peer rank published is read with plain data, shapes and dtypes only: a file
    that names os.system is refused (the rank keeps its own object), nothing runs."""
    import io
    import os
    import pickle

    from memlens.simulation.distributed.objects import _Loader

    ok = {"shape": torch.Size([4, 8]), "dtype": torch.bfloat16, "n": [1, 2.5, "x"]}
    assert _Loader(io.BytesIO(pickle.dumps(ok))).load() == ok
    with pytest.raises(pickle.UnpicklingError, match="refused posix.system"):
        _Loader(io.BytesIO(pickle.dumps(os.system))).load()


def test_each_object_collective_takes_every_parameter_of_torchs_own():
    # pipeline parallelism's stage-shape exchange calls send/recv_object_list(...,
    # use_batch=...): TypeError before; torch 2.14 adds weights_only to all six
    import inspect

    import torch.distributed as dist

    from memlens.simulation.distributed.objects import Rendezvous, functions

    ours = functions(Rendezvous.__new__(Rendezvous))
    assert len(ours) == 6
    for name, fn in ours.items():
        theirs = inspect.signature(getattr(dist, name)).parameters
        mine = inspect.signature(fn).parameters
        assert [p for p in theirs if p not in mine] == [], name
        assert [p for p in mine if p not in theirs and p != "weights_only"] == [], name


def test_a_pipeline_stages_shape_metadata_is_read_back():
    # torchtitan's pipeline: stage 1 received None (refused) and stopped with
    # "PipeliningMetadataError: Expected _StageForwardMeta from P2P, got NoneType"
    import io

    from torch.distributed.pipelining._utils import _StageForwardMeta, _TensorMeta
    from torch.distributed.tensor.placement_types import Replicate, Shard

    from memlens.simulation.distributed.objects import _dumps, _Loader

    activation = _TensorMeta(torch.Size([2, 128, 256]), (32768, 256, 1), torch.bfloat16, True)
    sent = [_StageForwardMeta(forward_metas=(activation,)), (Shard(0), Replicate())]
    assert _Loader(io.BytesIO(_dumps(sent))).load() == sent

"""`Module.to` and `Tensor.to` as a GPU run does them (issue 36: scripts as people write
them).

A bare device index names the simulated CUDA device on a CPU-only build of PyTorch.
PyTorch's DDP tutorial moves its model with `model.to(rank)` and its data with
`x.to(rank)`; a CPU-only build reads an integer device as its accelerator's, has none, and
raised "Cannot access accelerator device when none is available" before any kernel ran.
So do the script's own `torch.device(i)` and `torch.zeros(n, device=i)` (memlens
compiles the script it runs with each such call reading an int as `cuda:i`, as a CUDA
build does). Other calls' `device=i` (`x.new_zeros(n, device=i)`), and those in modules
the script imports, are parsed in C++ and still raise there: the script's error then says
what to write instead. FSDP1 reads its `device_id` with
`torch.device(device_id)`: PyTorch's FSDP tutorial passes `torch.cuda.current_device()`.

`param.data = other` gives the parameter `other`'s device, as on a GPU (a fake kept its
own: FSDP1, moving a host model to the GPU so, then found its parameters on the host).

A model converted on the device (`model.cuda().half()`) frees each parameter's old copy
as soon as its new one is made, as `Module._apply` does with real tensors (`.data =`).
Fakes made it swap instead, which kept the old copy until the next parameter's new one
was made: one parameter above the GPU's peak."""

from __future__ import annotations

import pickle

import pytest

torch = pytest.importorskip("torch")

from test_simulate_compiled_gpu_rules import events  # noqa: E402
from torch import nn  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.patches.device_index import build_reads_indices  # noqa: E402
from memlens.simulation.patches.triton_autotune import made_by_autotuning  # noqa: E402
from memlens.simulation.script import ScriptFailed  # noqa: E402

pytestmark = pytest.mark.torch


def test_module_and_tensor_to_a_bare_index_land_on_that_cuda_device():
    module_to = nn.Module.to
    with memlens.simulate(cublas_workspace=0):
        model = nn.Linear(8, 4).to(0)  # (8 x 4 + 4) fp32: 128 + 16 bytes, 512 each
        assert model.weight.device == torch.device("cuda", 0)
        x = torch.ones(16, 8).to(0, torch.bfloat16)  # 256 bytes
        y = torch.ones(16).to(device=0, non_blocking=True)  # 64 bytes
        half = model.to(0, dtype=torch.float16)  # new fp16 copies: 64 and 8 bytes
        assert (x.device, x.dtype, y.device) == (
            torch.device("cuda", 0), torch.bfloat16, torch.device("cuda", 0)
        )  # fmt: skip
        assert half.weight.dtype == torch.float16 and half.weight.is_cuda
        assert torch.cuda.memory_allocated() == 4 * 512
        # each fp32 parameter is freed once its fp16 copy is made: one copy at a time
        assert torch.cuda.max_memory_allocated() == 5 * 512
    assert nn.Module.to is module_to


SCRIPTS_DEVICES = """
import torch
ranks = []
def local_rank():
    ranks.append(1)
    return 1
class Args:
    rank = 0
first = torch.device(Args.rank)
second = torch.device(local_rank())  # evaluated once
assert (first, second, ranks) == (torch.device("cuda", 0), torch.device("cuda", 1), [1])
assert torch.device("cpu").type == "cpu" and torch.device(first) == first

@torch.compile
def double(x):
    return x.to(torch.device(0)) * 2

x = torch.zeros(256, device=Args.rank)  # torch.X(device=i) too
y = double(x)
assert y.device == first
z = x.new_zeros(256, device=0)  # line 21: a method's index reaches C++ directly
"""


def test_the_scripts_own_torch_device_index_is_cuda(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(SCRIPTS_DEVICES)
    if build_reads_indices():  # a CUDA build reads every index itself
        run = run_script(script, [], tmp_path / "o.pickle", cublas_workspace=0)
        assert events(run.sim)[-1] == ("+", 1024)
        return
    with pytest.raises(ScriptFailed) as failed:
        run_script(script, [], tmp_path / "o.pickle", cublas_workspace=0)
    assert failed.value.reason == (
        "RuntimeError: Cannot access accelerator device when none is available. [a CPU-only"
        " PyTorch has no accelerator for a bare device index; memlens reads .to(i) and the"
        " script's own torch.device(i) and torch.X(device=i) itself, not other calls' or"
        ' imported modules\': write torch.device("cuda", i), or run memlens under a CUDA'
        " build of torch, no GPU needed]"
    )
    assert 'rank.py", line 21, in <module>' in failed.value.traceback
    # everything before the factory ran, compiled (x and 2x): the run up to it is written
    written = failed.value.written
    assert written is not None and written == tmp_path / "o.pickle"
    trace = pickle.loads(written.read_bytes())["device_traces"][0]
    made = [e["size"] for e in trace if e["action"] == "alloc" and not made_by_autotuning(e)]
    assert made == [1024, 1024]


class TwoWeights(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(256, 1024))  # 1 MiB in fp32
        self.b = nn.Parameter(torch.zeros(256, 1024))


MIB = 1 << 20


@pytest.mark.parametrize("with_grads", [False, True])
def test_a_model_converted_on_the_device_frees_each_old_copy_at_once(with_grads):
    with memlens.simulate(cublas_workspace=0) as sim:
        model = TwoWeights().cuda()
        if with_grads:
            (model.a.sum() + model.b.sum()).backward()
        torch.cuda.reset_peak_memory_stats()
        start = len(events(sim))
        model.half()
        assert (model.a.dtype, model.a.is_cuda) == (torch.float16, True)
        if with_grads:
            assert model.a.grad is not None and model.a.grad.dtype == torch.float16
        # each new copy, then the old one it replaces (a swap kept the old `a` until the
        # new `b` was made: 3 MiB)
        one = [("+", MIB // 2), ("-", MIB)]
        assert events(sim)[start:] == one * (4 if with_grads else 2)
        assert torch.cuda.max_memory_allocated() == (4 if with_grads else 2) * MIB + MIB // 2
        assert torch.cuda.memory_allocated() == (2 if with_grads else 1) * MIB


def test_assigning_data_moves_a_tensor_to_the_datas_device():
    with memlens.simulate(cublas_workspace=0):
        param = nn.Parameter(torch.zeros(256))
        param.data = param.to("cuda")
        assert (param.device, param.is_cuda, param.data.device) == (
            torch.device("cuda", 0), True, torch.device("cuda", 0)
        )  # fmt: skip
        assert isinstance(param, nn.Parameter) and param.requires_grad
        assert torch.cuda.memory_allocated() == 1024
        param.data = torch.zeros(512, dtype=torch.float16)  # back to the host
        assert param.device == torch.device("cpu") and torch.cuda.memory_allocated() == 0


TUTORIALS = """
import torch, torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
ddp = DDP(nn.Linear(256, 256).to(rank), device_ids=[rank])  # as PyTorch's DDP tutorial
fsdp = FSDP(nn.Linear(512, 512), device_id=torch.cuda.current_device())  # its FSDP one
assert ddp.module.weight.device == fsdp.compute_device == torch.device("cuda", rank)
x = torch.randn(8, 512).to(rank)
fsdp(x).sum().backward()
print("allocated", torch.cuda.memory_allocated())
dist.destroy_process_group()
"""


def test_the_ddp_and_fsdp_tutorials_bare_indices_at_two_ranks(tmp_path):
    import subprocess
    import sys

    (tmp_path / "job.py").write_text(TUTORIALS)
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "--cublas-workspace", "0",
         "--nproc-per-node", "2", "-o", "out", "job.py"],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # DDP: weight 262,144 + bias 1,024 + its gradient bucket 263,168; FSDP1 (world 2): the
    # flat parameter's shard, (512 x 512 + 512) / 2 x 4 = 525,312, and its gradient; x 16,384
    expected = 262_144 + 1_024 + 263_168 + 2 * 525_312 + 16_384
    assert done.stdout.count(f"allocated {expected}\n") == 2, done.stdout

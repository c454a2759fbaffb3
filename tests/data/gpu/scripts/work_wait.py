"""NCCL on one rank: async collectives whose Python references are dropped before wait()."""

import os

import torch
import torch.distributed as dist
from _rec import dump, start

os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29533")
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
start()
a = torch.ones(1 << 20, device="cuda")
work = dist.all_reduce(a, async_op=True)
del a
b = torch.empty(1 << 19, device="cuda")
out = torch.empty(1 << 19, device="cuda")
work2 = dist.all_gather_into_tensor(out, b, async_op=True)
del b
with torch.profiler.record_function("before_wait"):
    c = torch.empty(1 << 18, device="cuda")
with torch.profiler.record_function("wait"):
    work.wait()
    work2.wait()
with torch.profiler.record_function("after_wait"):
    del work, work2
    d = torch.empty(1 << 18, device="cuda")
dump("work_wait.pickle")
dist.destroy_process_group()

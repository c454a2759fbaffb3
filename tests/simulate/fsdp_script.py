"""A torchrun-style FSDP2 (`fully_shard`) training step for
tests/simulate/test_simulate_distributed.py: the same MLP as ddp_script.py, each Linear
its own FSDP unit, then the root; AdamW. It writes torch.cuda.memory_allocated() at each
checkpoint, and the forward's peak, to the JSON file `--out` ({rank} -> $RANK)."""

import argparse
import json
import os
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True)
parser.add_argument("--keep-unsharded", action="store_true", help="reshard_after_forward=False")
parser.add_argument(
    "--offload", action="store_true", help="CPUOffloadPolicy: shards, grads, moments on the host"
)
opts = parser.parse_args()

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
marks: dict[str, object] = {}


def mark(name: str) -> None:
    marks[name] = torch.cuda.memory_allocated()


model = torch.nn.Sequential(
    torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)
).cuda()
offload = CPUOffloadPolicy() if opts.offload else OffloadPolicy()
for layer in (model[0], model[2]):
    fully_shard(layer, reshard_after_forward=not opts.keep_unsharded, offload_policy=offload)
fully_shard(model, reshard_after_forward=not opts.keep_unsharded, offload_policy=offload)
mark("sharded")
marks["local_rows"] = cast(Any, model[0].weight).to_local().shape[0]  # a DTensor, sharded
opt = torch.optim.AdamW(model.parameters(), foreach=False)
x = torch.randn(8, 256, device="cuda")
torch.cuda.reset_peak_memory_stats()
loss = model(x).sum()
mark("forward")
marks["forward_peak"] = torch.cuda.max_memory_allocated()
loss.backward()
mark("backward")
opt.step()
mark("step")
# where the sharded parameters, gradients and AdamW's moments live
weight = cast(Any, model[0].weight)
marks["devices"] = sorted(
    {str(cast(Any, t).to_local().device) for t in (weight, weight.grad, *opt.state[weight].values())
     if isinstance(t, torch.Tensor) and t.dim() > 0}
)  # fmt: skip
with open(opts.out.format(rank=os.environ["RANK"]), "w") as f:
    json.dump(marks, f)

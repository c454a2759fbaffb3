"""A torchrun-style DDP training script for tests/simulate/test_simulate_distributed.py:
a two-layer MLP (256 -> 256 -> 256, fp32: 131,584 parameters, 526,336 bytes), AdamW,
`--steps` steps of batch 8. It writes torch.cuda.memory_allocated() at each checkpoint
to the JSON file `--out` (the test's expected bytes are worked out by hand)."""

import argparse
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True, help="{rank} is replaced by $RANK")
parser.add_argument("--no-ddp", action="store_true")
parser.add_argument("--bucket-cap-mb", type=float, default=None)
parser.add_argument("--as-view", action="store_true")
parser.add_argument("--static-graph", action="store_true")
parser.add_argument("--find-unused", action="store_true")
parser.add_argument("--steps", type=int, default=2)
parser.add_argument("--rank-extra", type=int, default=0, help="bytes --extra-on also holds")
parser.add_argument("--extra-on", type=int, default=1, help="the rank holding --rank-extra")
parser.add_argument("--fail-rank", type=int, action="append", default=[], help="this rank raises")
opts = parser.parse_args()

checkpoints: dict[str, object] = {}


def mark(name: str) -> None:
    checkpoints[name] = torch.cuda.memory_allocated()


local_rank = int(os.environ.get("LOCAL_RANK", "0"))
if not opts.no_ddp:
    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
device = torch.device("cuda", local_rank)
model: torch.nn.Module = torch.nn.Sequential(
    torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)
).to(device)
mark("model")
if not opts.no_ddp:
    kwargs = {
        "gradient_as_bucket_view": opts.as_view,
        "static_graph": opts.static_graph,
        "find_unused_parameters": opts.find_unused,
    }
    if opts.bucket_cap_mb is not None:
        kwargs["bucket_cap_mb"] = opts.bucket_cap_mb
    model = DDP(model, device_ids=[local_rank], **kwargs)
mark("wrapped")
if int(os.environ.get("RANK", "0")) in opts.fail_rank:
    raise RuntimeError("this rank fails")
extra = None
if opts.rank_extra and int(os.environ.get("RANK", "0")) == opts.extra_on:
    extra = torch.empty(opts.rank_extra, dtype=torch.uint8, device=device)
opt = torch.optim.AdamW(model.parameters(), foreach=False)
for step in range(opts.steps):
    x = torch.randn(8, 256, device=device)
    loss = model(x).sum()
    mark(f"forward{step}")
    loss.backward()
    mark(f"backward{step}")
    opt.step()
    mark(f"step{step}")
    opt.zero_grad()
    mark(f"zero_grad{step}")
    del x, loss
checkpoints["env"] = {
    k: os.environ.get(k)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
}
if not opts.no_ddp:
    checkpoints["backend"] = dist.get_backend()
    checkpoints["world"] = dist.get_world_size()
    checkpoints["rank"] = dist.get_rank()
with open(opts.out.format(rank=os.environ.get("RANK", "0")), "w") as f:
    json.dump(checkpoints, f)

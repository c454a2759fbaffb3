"""An expert-parallel MoE layer's dispatch and combine, DeepSeek/torchtitan style, for
tests/simulate/test_simulate_routing.py: T = 64 tokens pick K = 2 of E = 2 x world
experts (2 per rank) by top-k, the counts come from a one-hot map (torchtitan's
`zeros_like(scores, bool).scatter_(-1, ids, True).sum(0)`), `histc` (`--histc`) or
`bincount` (`--bincount`), are
exchanged with all_to_all_single (torchtitan's functional collectives with
`--functional`), read back with `.tolist()`, and the tokens (rows of
256 fp32, 1,024 bytes) go out and come back by all_to_all_single with those splits.
Writes {splits, received bytes, peak} as JSON to argv[1]."""

import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
T, K, D, E = 64, 2, 256, 2 * world
x = torch.empty(T, D, device="cuda")
scores = torch.empty(T, E, device="cuda").softmax(-1)
_, ids = torch.topk(scores, K, dim=-1)
if "--histc" in sys.argv:
    counts = torch.histc(ids.view(-1).float(), bins=E, min=0, max=E).long()
elif "--bincount" in sys.argv:  # DeepSeek's: a size from values
    counts = torch.bincount(ids.flatten(), minlength=E)
else:
    counts = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, ids, True).sum(0)
functional = "--functional" in sys.argv  # torchtitan's: functional collectives
group = dist.group.WORLD
assert group is not None  # the default group, made above
if functional:
    import torch.distributed._functional_collectives as funcol

    received = funcol.all_to_all_single(counts.view(world, -1), None, None, group=group)
    received = torch.ops._c10d_functional.wait_tensor(received)
else:
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts)
in_splits = counts.view(world, -1).sum(1).cpu().tolist()
out_splits = received.view(world, -1).sum(1).cpu().tolist()
order = torch.argsort(ids.view(-1), stable=True)

base = torch.cuda.memory_allocated()
torch.cuda.reset_peak_memory_stats()
routed = x[order // K]  # (T x K, D), sorted by expert
if functional:
    recv = funcol.all_to_all_single_autograd(routed, out_splits, in_splits, group)
    recv = torch.ops._c10d_functional.wait_tensor(recv)
else:
    recv = routed.new_empty(sum(out_splits), D)
    dist.all_to_all_single(recv, routed, out_splits, in_splits)
recv_bytes = torch.cuda.memory_allocated() - base - routed.numel() * 4
del routed
out = recv * 2  # the experts
del recv
if functional:
    back = funcol.all_to_all_single_autograd(out, in_splits, out_splits, group)
    back = torch.ops._c10d_functional.wait_tensor(back)
else:
    back = out.new_empty(T * K, D)
    dist.all_to_all_single(back, out, in_splits, out_splits)
del out
combined = torch.zeros_like(x).index_add_(0, order // K, back)
peak = torch.cuda.max_memory_allocated() - base
with open(sys.argv[1], "w") as f:
    json.dump(
        {"counts": counts.tolist(), "in": in_splits, "out": out_splits,
         "received": recv_bytes, "peak": peak, "combined": list(combined.shape)},
        f,
    )  # fmt: skip

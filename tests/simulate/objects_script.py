"""Object collectives between simulated ranks, for tests/simulate/test_simulate_objects.py:
rank 0 broadcasts a config, every rank gathers every rank's name, rank 0 sends rank 1
a bf16 (4, 8) CUDA tensor as a pipeline stage sends its output's metadata. Writes what
each rank received as JSON to argv[1] ({rank} -> the rank)."""

import json
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
got: dict[str, object] = {"nccl": list(torch.cuda.nccl.version())}
config = [{"from": rank, "layers": 4}] if rank == 0 else [None]
dist.broadcast_object_list(config, src=0)
got["broadcast"] = config[0]
names: list[object] = [None] * dist.get_world_size()
dist.all_gather_object(names, f"rank{rank}")
got["all_gather"] = names
if rank == 0:
    dist.send_object_list([torch.empty(4, 8, device="cuda", dtype=torch.bfloat16)], dst=1)
else:
    box: list[torch.Tensor | None] = [None]
    dist.recv_object_list(box, src=0)
    t = box[0]
    got["received"] = None if t is None else [list(t.shape), str(t.dtype), str(t.device)]
    got["allocated"] = torch.cuda.memory_allocated()
with open(sys.argv[1].format(rank=rank), "w") as f:
    json.dump(got, f)

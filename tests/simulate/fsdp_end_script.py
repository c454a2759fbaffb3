"""One FSDP2 training step that ends holding its model, optimizer and batch, for the
end-state test in tests/simulate/test_simulate_end_state.py: two bias-free
Linear(256, 256) (P = 524,288 bytes of fp32 parameters), each its own FSDP2 unit, then
the root; AdamW; the gradients dropped by `zero_grad()` at the end. Every size divides
by 8 x 512, so at world 8 a rank's shards, moments and batch are whole allocator blocks."""

import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
model = torch.nn.Sequential(
    torch.nn.Linear(256, 256, bias=False), torch.nn.ReLU(), torch.nn.Linear(256, 256, bias=False)
).cuda()
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(8, 256, device="cuda")
model(x).sum().backward()
opt.step()
opt.zero_grad()

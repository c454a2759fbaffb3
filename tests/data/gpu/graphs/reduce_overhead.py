"""torch.compile(mode="reduce-overhead") training of a small MLP, five steps (cudagraph trees)."""

import torch
from _rec import dump, start

start()
model = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)
).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
step = torch.compile(model, mode="reduce-overhead")
for _ in range(5):
    x = torch.randn(32, 512, device="cuda")
    loss = step(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss, x
dump("reduce_overhead.pickle")

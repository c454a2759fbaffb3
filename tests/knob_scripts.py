"""Tiny scripts whose simulated memory is worked out by hand, for the what-if knobs of
`memlens plan` (tests/simulate/test_simulate_knobs.py, tests/planning/test_plan_knobs.py).
The figures are explained where they are asserted."""

# Four blocks Linear(256 -> 1024) -> relu -> Linear(1024 -> 256), no bias, fp32, batch 512:
# each weight is 1 MiB (8 MiB of parameters), the input x 512 KiB, a block's hidden
# (512 x 1024) 2 MiB and its output 512 KiB. No cuBLAS workspace (cublas_workspace=0).
MLP = """
import argparse, torch
p = argparse.ArgumentParser(); p.add_argument("--steps", type=int, default=0)
p.add_argument("--optimizer", default="sgd")
args = p.parse_args()
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(256, 1024, bias=False)
        self.down = torch.nn.Linear(1024, 256, bias=False)
    def forward(self, x):
        return self.down(torch.relu(self.up(x)))
model = torch.nn.Sequential(*[Block() for _ in range(4)]).cuda()
x = torch.empty(512, 256, device="cuda")
if args.steps == 0:
    loss = model(x).float().sum()  # forward only: the graph is kept, no backward
else:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        model(x).float().sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)  # a keyword, as scripts often write it
"""

# Four 1 MiB parameters with 1 MiB gradients, one Adam step: exp_avg and exp_avg_sq are
# 8 MiB more, so 16 MiB before any temporary.
ADAM = """
import torch
params = [torch.nn.Parameter(torch.empty(256 * 1024, device="cuda")) for _ in range(4)]
opt = torch.optim.Adam(params, lr=0.1)
for p in params:
    p.grad = torch.empty_like(p)
opt.step()
"""

# q = k = v: (B=2, H=4, S=1024, D=64) fp16 = 1 MiB, on an H100 (flash by default).
ATTENTION = """
import torch
import torch.nn.functional as F
q = torch.empty(2, 4, 1024, 64, device="cuda", dtype=torch.float16, requires_grad=True)
out = F.scaled_dot_product_attention(q, q, q)
"""

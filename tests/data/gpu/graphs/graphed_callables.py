"""torch.cuda.make_graphed_callables on a module, three training steps."""

import torch
from _rec import dump, start

start()
model = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(32, 512, device="cuda", requires_grad=True)
graphed = torch.cuda.make_graphed_callables(model, (x,))
for _ in range(3):
    inp = torch.randn(32, 512, device="cuda", requires_grad=True)
    out = graphed(inp)
    out.sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del out, inp
dump("graphed_callables.pickle")

"""torch.cuda.graph capture of a small MLP forward, then three replays."""

import torch
from _rec import dump, start

start()
model = torch.nn.Sequential(
    torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)
).cuda()
static_x = torch.randn(64, 1024, device="cuda")
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    for _ in range(3):
        model(static_x)
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(graph):
    static_y = model(static_x)
for _ in range(3):
    static_x.copy_(torch.randn(64, 1024, device="cuda"))
    graph.replay()
    result = static_y.clone()
    del result
dump("graph_capture.pickle")

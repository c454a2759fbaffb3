"""A compiled module whose forward is self.weight[ids, :], then .backward()."""
import torch
from _rec import dump, start


class Lookup(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(1000, 256, device="cuda"))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids, :]


start()
model = torch.compile(Lookup())
ids = torch.randint(0, 1000, (64, 128), device="cuda")
for _ in range(2):
    out = model(ids)
    out.sum().backward()
    del out
dump("compiled_index_backward.pickle")

"""A small transformer block trained under torch.compile (default mode) with one graph break, three steps."""
import torch
from _rec import dump, start


class Block(torch.nn.Module):
    def __init__(self, d: int = 512) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, 8, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        torch._dynamo.graph_break()
        return x + self.mlp(self.norm(x))


start()
model = torch.nn.Sequential(Block(), Block()).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
compiled = torch.compile(model)
for _ in range(3):
    x = torch.randn(8, 256, 512, device="cuda")
    loss = compiled(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    del loss, x
dump("compiled_training.pickle")

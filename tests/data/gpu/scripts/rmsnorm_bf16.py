"""bf16 nn.RMSNorm forward + backward: what the fused CUDA kernel keeps for backward."""
import torch
from _rec import dump, start

start()
norm = torch.nn.RMSNorm(4096, device="cuda", dtype=torch.bfloat16)
x = torch.randn(4, 512, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
y = norm(x)
loss = y.float().sum()
loss.backward()
del y, loss
z = torch.nn.functional.rms_norm(x.detach().float(), (4096,))
del z
dump("rmsnorm_bf16.pickle")

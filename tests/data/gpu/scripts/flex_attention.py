"""flex_attention eager and compiled, forward and backward, with a causal block mask."""
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from _rec import dump, start


def causal(b, h, q, kv):
    return q >= kv


start()
B, H, S, D = 2, 4, 512, 64
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
mask = create_block_mask(causal, B=None, H=None, Q_LEN=S, KV_LEN=S, device="cuda")
with torch.profiler.record_function("compiled"):
    compiled = torch.compile(flex_attention)
    out = compiled(q, k, v, block_mask=mask)
    out.float().sum().backward()
    del out
with torch.profiler.record_function("eager"):
    try:
        out = flex_attention(q, k, v, block_mask=mask)
        out.float().sum().backward()
        del out
    except Exception as exc:  # eager flex may be unsupported on some versions
        print("eager flex_attention failed:", exc)
dump("flex_attention.pickle")

"""The workload behind the cs336 snapshots in ../shared/snapshots, rebuilt for simulation.

A pre-norm Transformer LM (token embedding, RMSNorm, rotary embeddings, causal
self-attention with an explicit softmax, SwiGLU feed-forward, untied output layer), a
hand-written AdamW and cross-entropy. The op sequence follows what the recorded stacks
show (einsum projections, RoPE written into an empty tensor, a boolean causal mask), so
the same tensors are allocated and saved for backward as on the GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Literal

import torch
from torch import Tensor, nn

# where a module is built: what torch.empty(device=...) accepts
Device = torch.device | str | None

D_MODEL, D_FF, N_LAYERS, N_HEADS, VOCAB, BATCH, THETA = 2560, 10240, 32, 32, 10000, 4, 10000.0


class Linear(nn.Module):
    def __init__(
        self, d_in: int, d_out: int, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, std=0.02)

    def forward(self, x: Tensor) -> Tensor:
        return torch.einsum("...i,oi->...o", x, self.weight)


class Embedding(nn.Module):
    def __init__(
        self, n: int, d: int, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, d, device=device, dtype=dtype))
        nn.init.trunc_normal_(self.weight, std=1.0)

    def forward(self, ids: Tensor) -> Tensor:
        return self.weight[ids]


class RMSNorm(nn.Module):
    def __init__(
        self, d: int, eps: float = 1e-5, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(d, device=device, dtype=dtype))

    def forward(self, x: Tensor) -> Tensor:
        # upcast, normalise, scale (weight first: its autocast copy is made first in the
        # recording), back to the input dtype (a 4-byte copy per element under autocast)
        in_dtype = x.dtype
        x = x.to(torch.float32)
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        rms = (norm**2 / self.d + self.eps).sqrt()
        x = x / rms
        return torch.einsum("d,...d->...d", self.weight, x).to(in_dtype)


class RoPE(nn.Module):
    cos: Tensor  # buffers (register_buffer), which nn.Module types as Tensor | Module
    sin: Tensor

    def __init__(self, theta: float, d_k: int, max_len: int, device: Device = None) -> None:
        super().__init__()
        freq = theta ** (-torch.arange(0, d_k, 2, device=device).float() / d_k)
        angles = torch.arange(max_len, device=device).float()[:, None] * freq[None, :]
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        cos = self.cos[positions].unsqueeze(1)
        sin = self.sin[positions].unsqueeze(1)
        out = torch.empty_like(x)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out


def softmax(x: Tensor, dim: int) -> Tensor:
    m = torch.max(x, dim=dim, keepdim=True)
    e = torch.exp(x - m.values)
    return e / e.sum(dim=dim, keepdim=True)


class Attention(nn.Module):
    def __init__(
        self, d: int, h: int, max_len: int, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.h, self.dk = h, d // h
        self.q_proj, self.k_proj, self.v_proj, self.output_proj = (
            Linear(d, d, device, dtype) for _ in range(4)
        )
        self.rope = RoPE(THETA, self.dk, max_len, device)

    def forward(self, x: Tensor) -> Tensor:
        b, s, d = x.shape
        q, k, v = (
            p(x).view(b, s, self.h, self.dk).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        positions = torch.arange(s, device=x.device).unsqueeze(0).expand(b, -1)
        q, k = self.rope(q, positions), self.rope(k, positions)
        mask = torch.triu(torch.ones(s, s, device=x.device), diagonal=1).to(torch.bool)
        mask = (~mask).unsqueeze(0).unsqueeze(0).expand(b, self.h, -1, -1)
        scores = torch.einsum("...qd,...kd->...qk", q, k) / math.sqrt(self.dk)
        scores = scores.masked_fill(mask == False, -1e9)  # noqa: E712 (as the original)
        out = torch.einsum("...qk,...kd->...qd", softmax(scores, -1), v)
        # nn.Module.__call__ is typed as returning Any: the annotation says what it is
        y: Tensor = self.output_proj(out.transpose(1, 2).reshape(b, s, d))
        return y


class SwiGLU(nn.Module):
    def __init__(
        self, d: int, d_ff: int, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.w1, self.w2, self.w3 = (
            Linear(d, d_ff, device, dtype),
            Linear(d_ff, d, device, dtype),
            Linear(d, d_ff, device, dtype),
        )

    def forward(self, x: Tensor) -> Tensor:
        a, g = self.w1(x), self.w3(x)
        y: Tensor = self.w2(a * torch.sigmoid(a) * g)
        return y


class Block(nn.Module):
    def __init__(
        self, max_len: int, device: Device = None, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(D_MODEL, device=device), RMSNorm(D_MODEL, device=device)
        self.attn = Attention(D_MODEL, N_HEADS, max_len, device, dtype)
        self.ffn = SwiGLU(D_MODEL, D_FF, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        y: Tensor = x + self.ffn(self.ln2(x))
        return y


class TransformerLM(nn.Module):
    def __init__(
        self,
        context: int,
        n_layers: int = N_LAYERS,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.token_embeddings = Embedding(VOCAB, D_MODEL, device, dtype)
        self.layers = nn.ModuleList(Block(context, device, dtype) for _ in range(n_layers))
        self.ln_final = RMSNorm(D_MODEL, device=device)
        self.lm_head = Linear(D_MODEL, VOCAB, device, dtype)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.token_embeddings(ids)
        for layer in self.layers:
            x = layer(x)
        y: Tensor = self.lm_head(self.ln_final(x))
        return y


class AdamW(torch.optim.Optimizer):
    def __init__(
        self,
        params: Iterable[nn.Parameter],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ) -> None:
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    # torch.optim.Optimizer.step is overloaded on a closure; the recorded script never
    # passed one, so this step takes none (the override is narrower on purpose)
    def step(self, closure: None = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["t"], state["m"], state["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
                state["t"] += 1
                m, v, t = state["m"], state["v"], state["t"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                step = group["lr"] * math.sqrt(1 - b2**t) / (1 - b1**t)
                p.sub_(step * m / (v.sqrt() + group["eps"]))
                p.mul_(1 - group["lr"] * group["weight_decay"])


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    logits = logits.reshape(-1, logits.shape[-1])
    m = logits.max(dim=-1, keepdim=True).values
    lse = torch.log(torch.exp(logits - m).sum(-1)) + m.squeeze(-1)
    true = logits.gather(-1, targets.reshape(-1, 1)).squeeze(-1)
    return (lse - true).mean()


def run(
    context: int,
    fullstep: bool,
    mixed: bool = False,
    n_layers: int = N_LAYERS,
    compiled: bool = False,
) -> tuple[object, ...]:
    """What the recording script did: build on the GPU, then record one pass or step
    (`compiled`: of `torch.compile(model)`, compiled at its first call, inside the window).

    Returns what the script still held when it dumped the snapshot (keep it alive until
    the simulation ends)."""
    device = torch.device("cuda")
    net = TransformerLM(context, n_layers, device=device)
    optimizer = AdamW(net.parameters())
    model: Callable[..., Tensor] = torch.compile(net) if compiled else net
    batch = torch.randint(0, VOCAB, (BATCH, context)).to(device)
    cast = torch.autocast("cuda", dtype=torch.bfloat16) if mixed else _nullcontext()
    with cast:
        torch.cuda.memory._record_memory_history(max_entries=1000000)
        torch.cuda.empty_cache()
        if fullstep:
            optimizer.zero_grad()
            loss = cross_entropy(model(batch), batch)
            loss.backward()
            optimizer.step()
            return model, optimizer, batch, loss
        return model, optimizer, batch, model(batch)


class _nullcontext:
    def __enter__(self) -> _nullcontext:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        return False

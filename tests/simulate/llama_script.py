"""A torchrun-style training step of a small Llama-style model, built from a config
(no weights, no hub), for tests/simulate/test_simulate_llama.py: token embedding,
`--layers` blocks of RMSNorm, causal self-attention through SDPA (no RoPE: it adds no
parameters) and a SwiGLU MLP, a final RMSNorm and an output head, tied to the
embedding with `--tied`. Every Linear is bias-free, as in Llama. `--mode` wraps it:
single (one GPU, no process group), ddp, fsdp2 (`fully_shard` per block, then the
root), fsdp1 (`FullyShardedDataParallel`, a unit per block, `--strategy`), tp
(`parallelize_module`: q, k, v and the MLP's w1, w3 colwise; wo and w2 rowwise) or sp
(tp plus sequence parallel) or 3d (tp on the last dimension of a `--mesh`
replicate x shard x tp device mesh, then HSDP: `fully_shard` per block and the root on the
first two). `--checkpoint` wraps every block in `checkpoint_wrapper`,
`--bf16` gives FSDP2 a bf16 MixedPrecisionPolicy, `--meta` builds on the meta device,
`--tracker` runs the step under PyTorch's MemTracker (FSDPMemTracker with FSDP2). One step of AdamW
(foreach=False). torch.cuda.memory_allocated() at each checkpoint goes to `--out`.
"""

import argparse
import contextlib
import json
import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True, help="{rank} is replaced by $RANK")
parser.add_argument(
    "--mode", default="single", choices=["single", "ddp", "fsdp2", "fsdp1", "tp", "sp", "3d"]
)
parser.add_argument(
    "--mesh", default="2,2,2", help="3d: replicate,shard,tp sizes (HSDP over the first two)"
)
parser.add_argument("--vocab", type=int, default=250)
parser.add_argument("--dim", type=int, default=64)
parser.add_argument("--heads", type=int, default=8)
parser.add_argument("--inter", type=int, default=176)
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--batch", type=int, default=2)
parser.add_argument("--seq", type=int, default=16)
parser.add_argument("--tied", action="store_true")
parser.add_argument("--bf16", action="store_true", help="FSDP2 MixedPrecisionPolicy(bf16)")
parser.add_argument("--checkpoint", action="store_true", help="activation checkpointing per block")
parser.add_argument(
    "--meta", action="store_true", help="build on the meta device, materialise after fully_shard"
)
parser.add_argument("--strategy", default="FULL_SHARD", help="FSDP1's ShardingStrategy")
parser.add_argument("--no-step", action="store_true", help="forward and backward only")
parser.add_argument(
    "--tracker", action="store_true", help="run the step under PyTorch's (FSDP)MemTracker too"
)
opts = parser.parse_args()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: under tensor parallel each rank holds heads / tp of them
        q, k, v = (
            w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
        )
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        projected: torch.Tensor = self.wo(out.transpose(1, 2).reshape(b, s, -1))
        return projected


class MLP(nn.Module):
    def __init__(self, dim: int, inter: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, inter, bias=False)
        self.w3 = nn.Linear(dim, inter, bias=False)
        self.w2 = nn.Linear(inter, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, inter: int) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(dim)
        self.attention = Attention(dim, heads)
        self.ffn_norm = RMSNorm(dim)
        self.feed_forward = MLP(dim, inter)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = x + self.attention(self.attention_norm(x))
        out: torch.Tensor = h + self.feed_forward(self.ffn_norm(h))
        return out


class Llama(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(opts.vocab, opts.dim)
        self.layers = nn.ModuleList(
            Block(opts.dim, opts.heads, opts.inter) for _ in range(opts.layers)
        )
        self.norm = RMSNorm(opts.dim)
        self.output = nn.Linear(opts.dim, opts.vocab, bias=False)
        if opts.tied:
            self.output.weight = self.tok_embeddings.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h)
        logits: torch.Tensor = self.output(self.norm(h))
        return logits


marks: dict[str, Any] = {}


def mark(name: str) -> None:
    marks[name] = torch.cuda.memory_allocated()


local_rank = int(os.environ.get("LOCAL_RANK", "0"))
device = torch.device("cuda", local_rank)
if opts.mode != "single":
    import torch.distributed as dist

    dist.init_process_group("nccl")
    torch.cuda.set_device(local_rank)
if opts.meta:  # as large-model FSDP2 scripts do: never the whole model on one GPU
    with torch.device("meta"):
        llama = Llama()
else:
    llama = Llama().to(device)
layers = llama.layers  # each parallelism wraps the blocks, then the whole
model: nn.Module = llama
if opts.checkpoint:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for i, layer in enumerate(layers):
        layers[i] = checkpoint_wrapper(layer)
if opts.mode == "ddp":
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(model, device_ids=[local_rank])
elif opts.mode == "fsdp2":
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if opts.bf16
        else MixedPrecisionPolicy()  # fully_shard's default: no casts
    )
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    if opts.meta:
        model.to_empty(device=device)
elif opts.mode == "fsdp1":
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    model = FullyShardedDataParallel(
        model,
        auto_wrap_policy=ModuleWrapPolicy({Block}),
        device_id=device,
        sharding_strategy=ShardingStrategy[opts.strategy],
    )
elif opts.mode in ("tp", "sp", "3d"):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleInputOutput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    if opts.mode == "3d":  # HSDP (replicate x shard) over tensor parallel
        sizes = tuple(int(n) for n in opts.mesh.split(","))
        mesh3 = init_device_mesh("cuda", sizes, mesh_dim_names=("replicate", "shard", "tp"))
        mesh = mesh3["tp"]
    else:
        mesh = init_device_mesh("cuda", (int(os.environ["WORLD_SIZE"]),))
    plan = {
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(),
    }
    if opts.mode == "sp":
        # sequence parallel: the norms and residual stream sharded on the sequence,
        # all-gathered before attention and the MLP, reduce-scattered after them; each
        # block takes and gives a replicated plain tensor
        gather = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        plan.update({
            "attention_norm": SequenceParallel(),
            "ffn_norm": SequenceParallel(),
            "attention": gather,
            "feed_forward": gather,
            "attention.wo": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        })  # fmt: skip
    for layer in layers:
        inner = getattr(layer, "_checkpoint_wrapped_module", layer)
        if opts.mode == "sp":
            parallelize_module(
                inner,
                mesh,
                PrepareModuleInputOutput(
                    input_layouts=(Replicate(),),
                    desired_input_layouts=(Shard(1),),
                    output_layouts=(Shard(1),),
                    desired_output_layouts=(Replicate(),),
                    use_local_input=False,
                    use_local_output=True,
                ),
            )
        parallelize_module(inner, mesh, plan)
    if opts.mode == "3d":
        from torch.distributed.fsdp import fully_shard

        for layer in layers:
            fully_shard(layer, mesh=mesh3["replicate", "shard"])
        fully_shard(model, mesh=mesh3["replicate", "shard"])
mark("params")
marks["local_shapes"] = {
    name: list(getattr(p, "_local_tensor", p).shape) for name, p in model.named_parameters()
}
opt = torch.optim.AdamW(model.parameters(), foreach=False)
tokens = torch.randint(0, opts.vocab, (opts.batch, opts.seq), device=device)
tracker: Any = contextlib.nullcontext()
if opts.tracker:
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker

    if opts.mode == "fsdp2":
        tracker = FSDPMemTracker(model, opt)
        tracker.track_inputs((tokens,))
    else:
        tracker = MemTracker()
        tracker.track_external(model, opt, tokens)
torch.cuda.reset_peak_memory_stats()
with tracker:
    logits = model(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens.flatten())
    del logits
    mark("forward")
    loss.backward()
    del loss
    mark("backward")
    if not opts.no_step:
        opt.step()
        mark("step")
marks["peak"] = torch.cuda.max_memory_allocated()
if opts.tracker:
    import mem_tracker_rules  # beside this script

    marks["tracker_peak"] = mem_tracker_rules.tracker_peak(tracker)
    marks["tracker_by_kind"] = mem_tracker_rules.peak_by_kind(tracker)
with open(opts.out.format(rank=os.environ.get("RANK", "0")), "w") as f:
    json.dump(marks, f)

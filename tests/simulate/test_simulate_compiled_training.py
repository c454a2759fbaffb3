"""What stopped or skewed a real third-party compiled training script (nanoGPT's train.py,
compile on by default, bf16 autocast, dropout; tests/simulate/test_simulate_nanogpt.py),
each on a small case with exact figures:

- a compiled graph called under `torch.autocast("cuda")` ran its matmuls in fp32: while
  AOTAutograd traces, the graph's arguments are FunctionalTensors, which autocast's
  policy did not count as CUDA tensors;
- `F.scaled_dot_product_attention` broke every attention layer's graph in two (Dynamo
  inlined the simulation's Python SDPA and stopped at its backend choice);
- `nn.Dropout` in a compiled training graph made the graph run eagerly (Inductor's
  random-number pass reads the fake mode from `V`, which was not set);
- a float argument Dynamo turns into a tensor (`TensorifyScalarRestartAnalysis`, its
  signal to trace again) made the graph run eagerly, and Dynamo tried to compile the
  simulation's dispatch (a graph break and a warning);
- a compiled LayerNorm without bias under `no_grad` failed (a value freed before its
  last reader: the fused kernel's order put `getitem(var_mean, 0)` after the release);
- the stack of an allocation under AOTAutograd's generated wrapper failed to hash its
  code object (a dict among its constants);
- a data loader's `torch.randint` offsets answered 0, so `data[i : i + block]` was empty;
- `f"{loss:.4f}"` of a host scalar raised;
- compiled then wrapped in DDP (nanoGPT on several GPUs), Dynamo's own fake tensors were
  counted as the program's memory; wrapped then compiled, Dynamo compiled the
  simulation's own free callback (a second graph).

And what skewed modded-nanogpt's record (test_simulate_modded_nanogpt.py): FlexAttention
with a document mask under DDP ran eagerly (its dense math on AOTAutograd's
FunctionalTensors), and the backward's first kernel did not write over the donated
saved logits.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_simulate_compiled_gpu_rules import events  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.patches.frames import FrameCollector  # noqa: E402

pytestmark = pytest.mark.torch


def eager_fallbacks(sim: Any) -> list[str]:
    return [n for n in sim.notes if "ran eagerly" in n]


def test_a_compiled_graph_under_autocast_casts_as_cuda_autocast_does():
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        lin = nn.Linear(64, 32, bias=False, device="cuda")
        x = torch.randn(16, 64, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            before = len(events(sim))
            y = torch.compile(lambda t: lin(t))(x)
            got = events(sim)[before:]
    assert y.dtype == torch.bfloat16
    # the bf16 copies of the input (16 x 64) and the weight (32 x 64), the mm's bf16
    # output (16 x 32, 1,024 bytes; 2,048 in fp32), then the copies die
    assert got == [("+", 2048), ("+", 4096), ("+", 1024), ("-", 2048), ("-", 4096)]
    assert not eager_fallbacks(sim)


def test_compiled_attention_is_one_graph_with_the_cuda_kernel():
    from torch._dynamo.utils import counters

    counters.clear()
    with memlens.simulate(cublas_workspace=0) as sim:
        lin = nn.Linear(64, 192, device="cuda")

        def attention(x: Any) -> Any:
            q, k, v = lin(x).split(64, dim=2)
            q, k, v = (t.view(2, 16, 4, 16).transpose(1, 2) for t in (q, k, v))
            return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)

        x = torch.randn(2, 16, 64, device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = torch.compile(attention)(x)
        out.float().sum().backward()
    assert dict(counters["graph_break"]) == {}  # one graph, as on a GPU
    assert "flash" in sim.sdpa_backends  # bf16 with dropout on an H100
    assert out.dtype == torch.bfloat16 and not eager_fallbacks(sim)


def test_compiled_dropout_in_training_compiles():
    with memlens.simulate(cublas_workspace=0) as sim:
        model = nn.Sequential(nn.Linear(64, 64, device="cuda"), nn.Dropout(0.2))
        x = torch.randn(8, 64, device="cuda")
        torch.compile(model)(x).sum().backward()
    assert not eager_fallbacks(sim)
    assert any("torch.compile" in n for n in sim.notes)


def test_a_float_argument_traced_again_is_not_an_eager_fallback():
    from torch._dynamo.utils import counters

    counters.clear()
    with memlens.simulate(cublas_workspace=0) as sim:
        w = torch.randn(64, device="cuda", requires_grad=True)
        step = torch.compile(lambda x, p: F.dropout(x * 2, p).sum())
        # a dropout probability that changes: Dynamo makes it a dynamic float, which
        # the graph cannot take as a tensor, and traces again with it specialised
        for p in (0.1, 0.2, 0.3):
            step(w, p).backward()
    assert counters["stats"]["unique_graphs"] >= 2
    assert not eager_fallbacks(sim)


def test_a_float_made_a_tensor_breaks_no_graph_in_the_simulation():
    from torch._dynamo.utils import counters

    counters.clear()
    with memlens.simulate(cublas_workspace=0):
        w = torch.randn(64, device="cuda", requires_grad=True)
        step = torch.compile(lambda x, s: (x.softmax(0) * s).pow(s).sum())
        # a float that changes and is used as a tensor: Dynamo makes it one, outside the
        # graph, and the simulation's dispatch of that is not a frame Dynamo may compile
        for s in (0.5, 1.5, 2.5):
            step(w, s).backward()
    assert counters["stats"]["unique_graphs"] >= 2
    assert dict(counters["graph_break"]) == {}


def test_a_compiled_layer_norm_without_bias_under_no_grad():
    with memlens.simulate(cublas_workspace=0) as sim, torch.no_grad():
        weight = torch.ones(64, device="cuda")
        x = torch.randn(32, 64, device="cuda")
        before = len(events(sim))
        y = torch.compile(lambda t: F.layer_norm(t, (64,), weight, None))(x)
        got = events(sim)[before:]
    # one persistent-reduction kernel: mean and variance stay in registers, the output
    # (32 x 64 fp32) is the graph's only buffer
    assert got == [("+", 32 * 64 * 4)]
    assert tuple(y.shape) == (32, 64) and not eager_fallbacks(sim)


def test_stacks_through_code_whose_constants_cannot_be_hashed():
    frames = FrameCollector()

    def collect() -> Any:
        return frames.collect()

    # code made at run time with a dict among its constants, as AOTAutograd's generated
    # runtime wrapper has: such a code object cannot be hashed
    source = compile("def wrapper(f):\n    return f()\n", "<generated>", "exec")
    code = next(c for c in source.co_consts if isinstance(c, types.CodeType))
    code = code.replace(co_consts=(*code.co_consts, {"a": 1}))
    with pytest.raises(TypeError):
        hash(code)
    wrapper = types.FunctionType(code, {})
    stack = wrapper(collect)
    assert [f["name"] for f in stack[:2]] == ["collect", "wrapper"]
    assert stack[1]["filename"] == "<generated>" and stack[1]["line"] == 2


def test_host_random_draws_are_the_real_ones():
    torch.manual_seed(1337)
    expected = torch.randint(1000, (4,)).tolist()
    expected_order = torch.randperm(6).tolist()
    data = np.arange(2000)
    with memlens.simulate():
        torch.manual_seed(1337)
        ix = torch.randint(1000, (4,))
        order = torch.randperm(6)
        blocks = [data[i : i + 8] for i in ix]  # nanoGPT's get_batch
        starts = [int(i) for i in ix]
        on_device = torch.randint(1000, (4,), device="cuda")  # no CUDA generator: no values
        device_value = int(on_device[0])
        assert order.tolist() == expected_order
    assert starts == expected
    assert [b.tolist() for b in blocks] == [list(range(i, i + 8)) for i in expected]
    assert device_value == 0


def test_a_host_scalar_formats_as_its_value():
    with memlens.simulate():
        torch.manual_seed(0)
        drawn = torch.randint(10, 100, (1,))[0]
        unknown = torch.zeros(3).mean()  # no value known: formatted as 0.0, with a note
        text = f"{drawn:d} {unknown:.4f}"
        plain = f"{drawn}"
    torch.manual_seed(0)
    value = int(torch.randint(10, 100, (1,))[0])
    assert text == f"{value:d} 0.0000"
    assert plain == str(value)  # as a real one-element tensor formats


def test_a_compiled_graph_with_data_dependent_sizes_and_an_input_mutation(monkeypatch):
    """The shape of torchtitan's compiled mixture-of-experts block (EP 2 x TP 2 with
    `--compile.enable`, tests/simulate/test_simulate_torchtitan.py): `.item()` of token
    counts under `capture_scalar_outputs`, a buffer sliced to that many rows (a size
    only known at run time), the checks Dynamo adds on it (`_assert_scalar`), and a
    counter updated in place (written back by `copy_` at the graph's end)."""
    import torch._dynamo

    monkeypatch.setattr(torch._dynamo.config, "capture_scalar_outputs", True)
    with memlens.simulate(cublas_workspace=0) as sim:
        torch.manual_seed(0)
        counts = torch.randint(1, 8, (4,)).to("cuda")  # drawn on the host: values
        seen = torch.zeros(4, device="cuda")
        x = torch.randn(64, 16, device="cuda")

        def step(x: Any, counts: Any) -> Any:
            n = counts.sum().item()
            seen.add_(counts)
            return (x[:n] * 2).sum(0), x[:n] * 3

        before = len(events(sim))
        total, rows = torch.compile(step, fullgraph=True)(x, counts)
        got = events(sim)[before:]
    torch.manual_seed(0)
    n = int(torch.randint(1, 8, (4,)).sum())
    assert tuple(rows.shape) == (n, 16) and not eager_fallbacks(sim)
    # the count's sum (int64) read by `.item()` and freed; the column sums (16 fp32,
    # the slice and the product fused into the reduction); the (n, 16) product. The
    # counter's update is computed straight into its buffer: no temporary.
    assert got == [("+", 8), ("-", 8), ("+", 64), ("+", n * 16 * 4)]


def simulate_job(tmp_path: Any, *options: str) -> Any:
    """`memlens simulate OPTIONS job.py` in a fresh process, as a user runs it: it
    succeeds and no compiled graph falls back to eager."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "memlens", "simulate", "--cublas-workspace", "0", *options],
        capture_output=True, text=True, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ran eagerly" not in done.stderr
    return done


DDP_SCRIPT = """
import json, sys, torch, torch.distributed as dist
from torch._dynamo.utils import counters
from torch.nn.parallel import DistributedDataParallel as DDP

class MLP(torch.nn.Module):  # a user's class: Dynamo compiles its forward (not torch's
    def __init__(self):      # nn.Sequential, whose frames it skips when not inlined)
        super().__init__()
        self.up, self.down = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))

dist.init_process_group("nccl")
torch.cuda.set_device(dist.get_rank())
model = MLP().cuda()
if sys.argv[1] == "compile-then-ddp":
    model = torch.compile(model)  # nanoGPT's order
model = DDP(model, bucket_cap_mb=1)  # two buckets: DDP's graph splitter makes two graphs
if sys.argv[1] == "ddp-then-compile":
    model = torch.compile(model)  # the order PyTorch's DDP documentation shows
optimizer = torch.optim.AdamW(model.parameters())
x = torch.randn(64, 256, device="cuda")
for _ in range(2):
    model(x).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
print("DYNAMO", json.dumps(dict(counters["stats"])))
dist.destroy_process_group()
"""


def test_compiled_ddp_holds_what_eager_ddp_holds(tmp_path):
    """nanoGPT's multi-GPU run (compile, then DDP): DDP's graph splitter compiles each
    bucket's graph at its first call, with the simulation's modes on, and keeps fake
    copies of each bucket's parameters; those fakes of Dynamo's own were counted as the
    program's memory (nanoGPT's DDP run: 6.7 GiB on rank 0 instead of 1.7). The other
    order (DDP, then compile) made Dynamo compile the simulation's own free callback, a
    second graph a GPU run does not have; each order now compiles the one forward graph
    of three ops, as torch does on the host."""
    import json

    (tmp_path / "job.py").write_text(DDP_SCRIPT)
    end = {}
    for kind in ("eager", "compile-then-ddp", "ddp-then-compile"):
        options = ("--nproc-per-node", "2", "--ranks", "all", "--workers", "1", "-o", kind)
        done = simulate_job(tmp_path, *options, "job.py", kind)
        dynamo = [
            json.loads(line[7:]) for line in done.stdout.splitlines() if line[:7] == "DYNAMO "
        ]
        compiled = {} if kind == "eager" else {"calls_captured": 3, "unique_graphs": 1}
        assert dynamo == [compiled, compiled]  # one line per rank
        end[kind] = [
            memlens.load(tmp_path / kind / f"rank{r}.pickle").device(0).end_active_bytes
            for r in (0, 1)
        ]
    # parameters, AdamW's moments and steps, DDP's two buckets, the input: the same
    assert end["compile-then-ddp"] == end["ddp-then-compile"] == end["eager"]


def _capped_logits_loss_events(donate: bool) -> tuple[list[tuple[str, int]], int]:
    from torch._functorch import config as functorch_config

    with (
        functorch_config.patch(donated_buffer=donate),
        memlens.simulate(cublas_workspace=0) as sim,
    ):
        head = nn.Linear(64, 1000, bias=False, device="cuda", dtype=torch.bfloat16)

        def loss_fn(x, targets):  # modded-nanogpt's head: soft-capped logits, fp32 loss
            logits = 30 * torch.tanh(head(x) / 30)
            return F.cross_entropy(logits.float().view(-1, 1000), targets)

        x = torch.randn(1, 4096, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        targets = torch.randint(0, 1000, (4096,), device="cuda")
        loss = torch.compile(loss_fn)(x, targets)
        before = len(events(sim))
        loss.backward()
        peak = torch.cuda.max_memory_allocated()
    return events(sim)[before:], peak


def test_the_backward_writes_over_a_donated_saved_tensor():
    """AOTAutograd donates the saved tensors only the backward holds (functorch's
    `donated_buffer`, on by default) and Inductor's first backward kernel writes the bf16
    logits' gradient in place over the saved bf16 logits (4096 x 1000 x 2 = 8,192,000
    bytes) instead of a new buffer, reading them through the loss's `view(-1, V)` at the
    index it writes (a contiguous reshape: the same linear index). Without it,
    modded-nanogpt's peak, at the start of its backward, was one logits tensor (6.14 GiB
    of 65,536 x 50,304) above the simulation's own with it."""
    logits = 4096 * 1000 * 2
    donated, donated_peak = _capped_logits_loss_events(True)
    kept, kept_peak = _capped_logits_loss_events(False)
    assert ("+", logits) in kept and ("+", logits) not in donated
    assert kept.count(("-", logits)) == 2 and donated.count(("-", logits)) == 1
    assert [e for e in kept if e[1] != logits] == [e for e in donated if e[1] != logits]
    # the peak then comes elsewhere (the gradients' GEMMs), lower
    assert donated_peak < kept_peak


FLEX_DDP_SCRIPT = """
import torch, torch.distributed as dist
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from torch.nn.parallel import DistributedDataParallel as DDP

S, BLOCK = 1024, 128

class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(64, 3 * 64, bias=False)

    def forward(self, inputs, x):
        docs = (inputs == 7).cumsum(0)  # document ids, read by the mask_mod

        def document_causal(b, h, q_idx, kv_idx):
            return (q_idx >= kv_idx) & (docs[q_idx] == docs[kv_idx])

        blocks = torch.arange(S // BLOCK, dtype=torch.int32, device="cuda")
        dense = blocks[:, None] >= blocks
        num = dense.sum(dim=-1, dtype=torch.int32)[None, None].contiguous()
        order = dense.argsort(dim=-1, descending=True, stable=True).to(torch.int32)
        mask = BlockMask.from_kv_blocks(
            num, order[None, None].contiguous(), BLOCK_SIZE=BLOCK, mask_mod=document_causal
        )
        q, k, v = (t.transpose(1, 2) for t in self.qkv(x).view(1, S, 3, 1, 64).unbind(2))
        return flex_attention(q, k, v, block_mask=mask)

dist.init_process_group("nccl")
model = DDP(torch.compile(Attention().cuda()))  # modded-nanogpt's order
inputs = torch.randint(0, 10, (S,), device="cuda")
model(inputs, torch.randn(S, 64, device="cuda")).sum().backward()
"""


def test_compiled_flex_attention_with_a_document_mask_under_ddp(tmp_path):
    """modded-nanogpt's attention: a compiled model wrapped in DDP, FlexAttention with a
    mask_mod reading document ids computed in the graph. While AOTAutograd traced it, the
    simulation ran the HOP's dense math on FunctionalTensors, whose C++ device reads
    `cpu`: the index tensors landed on the host, the mask mixed devices and the whole
    graph ran eagerly (a 65,536-token score matrix per layer in modded-nanogpt: 651 GiB
    predicted against 34 GiB on its GPUs). The HOP now takes its own rules there."""
    (tmp_path / "job.py").write_text(FLEX_DDP_SCRIPT)
    done = simulate_job(tmp_path, "--nproc-per-node", "1", "-o", "out", "job.py")
    assert "note: torch.compile" in done.stderr


SPLIT_DDP_SCRIPT = """
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(100, 16)

    def forward(self, inputs):
        return self.embed(inputs[None]).sum() * len(inputs)

dist.init_process_group("nccl")
model = DDP(torch.compile(Model().cuda()), device_ids=[0])
inputs = torch.randint(0, 100, (4096,), device="cuda")
for micro_batch in inputs.split(2048):  # views: modded-nanogpt's 2025-01-04 record
    model(micro_batch).backward()
"""


def test_a_view_into_a_compiled_model_under_ddp(tmp_path):
    """Dynamo hands a frame to DDP's graph splitter without turning the dispatch modes off
    (it does for every other frame); a view argument's fake was then made through the
    simulation's modes and Dynamo stopped ("needs to be a FakeTensor wrapped by this
    instance of Dynamo")."""
    (tmp_path / "job.py").write_text(SPLIT_DDP_SCRIPT)
    simulate_job(tmp_path, "--nproc-per-node", "1", "-o", "out", "job.py")

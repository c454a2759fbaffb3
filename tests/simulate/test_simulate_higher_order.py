"""Higher-order operators in the simulation (memlens.simulation.patches.higher_order) and
in the Inductor plan (memlens.simulation.patches.inductor_plan).

`run_dtensor_rng_op` is what DTensor's random init (`init.normal_` on a sharded
parameter) calls: an FSDP2 model built on the meta device and initialised after
`to_empty` stopped on it. `flex_attention` in eager mode is PyTorch's math
implementation (the full score matrix, as on a GPU); compiled, it is Inductor's kernel,
which allocates the output, the logsumexp and the row maxima only.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from torch.nn.attention.flex_attention import flex_attention  # noqa: E402

import memlens  # noqa: E402
from memlens.simulation.api import run_script  # noqa: E402
from memlens.simulation.distributed.env import World  # noqa: E402

META_INIT = """\
import json, os, sys, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("nccl"); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
with torch.device("meta"):
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 256))
for layer in model: fully_shard(layer)
fully_shard(model)
model.to_empty(device="cuda")
for layer in model: torch.nn.init.normal_(layer.weight); torch.nn.init.zeros_(layer.bias)
json.dump({"allocated": torch.cuda.memory_allocated()}, open(sys.argv[1], "w"))
"""


def test_fsdp2_meta_init_runs_dtensors_random_init(tmp_path, monkeypatch):
    (tmp_path / "init.py").write_text(META_INIT)
    for key, value in World(8).env(7).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / "m.json"
    run_script(tmp_path / "init.py", [str(out)], tmp_path / "s.pickle", cublas_workspace=0)
    # rank 7 of 8: 32 rows of each 256 x 256 fp32 weight (32,768 B) and of each bias
    # (128 B, one 512-byte block); the random fills work in place
    assert json.loads(out.read_text()) == {"allocated": 2 * 32_768 + 2 * 512}


B, H, S, D = 2, 4, 256, 64
QKV = B * H * S * D * 2  # bf16: 262,144 B each
ROW_STATS = B * H * S * 4  # logsumexp or row maxima, fp32: 8,192 B
SCORES = B * H * S * S * 4  # the fp32 score matrix: 2 MiB
BLOCK_MASK = 4 * 512  # the default block mask's four small index tensors


def run_flex(compiled: bool) -> tuple[int, int, list[tuple[str, int]]]:
    with memlens.simulate(cublas_workspace=0) as sim:
        q, k, v = (
            torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            for _ in range(3)
        )
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        attend = torch.compile(flex_attention) if compiled else flex_attention
        out = attend(q, k, v)
        assert out.device == torch.device("cuda", 0)
        kept = torch.cuda.memory_allocated() - before
        peak = torch.cuda.max_memory_allocated() - before
        out.sum().backward()
        assert q.grad is not None and q.grad.device == torch.device("cuda", 0)
    assert sim.snapshot is not None
    large = [
        ("+" if e["action"] == "alloc" else "-", e["size"])
        for e in sim.snapshot["device_traces"][0]
        if e["action"] in ("alloc", "free_completed") and e["size"] >= ROW_STATS
    ]
    return kept, peak, large[3:]  # after q, k, v


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_eager_flex_attention_runs_the_math_implementation():
    kept, peak, large = run_flex(compiled=False)
    assert ("+", SCORES) in large  # the score matrix a GPU materialises without compile
    assert peak > 2 * SCORES
    assert kept >= QKV + ROW_STATS + BLOCK_MASK


def test_compiled_flex_attention_allocates_the_kernels_own_buffers():
    kept, peak, large = run_flex(compiled=True)
    # forward: out, logsumexp (kept for backward), row maxima (unused: freed at once)
    assert large[:4] == [("+", QKV), ("+", ROW_STATS), ("+", ROW_STATS), ("-", ROW_STATS)]
    assert kept == QKV + ROW_STATS + BLOCK_MASK
    assert peak == QKV + 2 * ROW_STATS + BLOCK_MASK
    assert ("+", SCORES) not in large  # no score matrix, forward or backward


def test_the_inductor_plan_takes_a_higher_order_node_as_an_extern_call():
    import operator

    from torch.fx import Graph

    from memlens.simulation.patches.inductor_plan import plan

    graph = Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(64, 64, device="meta")
    sub = graph.get_attr("subgraph_0")
    call = graph.call_function(torch.ops.higher_order.invoke_subgraph, (sub, "id", x))
    call.meta["val"] = (torch.empty(64, 64, device="meta"),)
    first = graph.call_function(operator.getitem, (call, 0))
    first.meta["val"] = torch.empty(64, 64, device="meta")
    doubled = graph.call_function(torch.ops.aten.mul.Tensor, (first, 2))
    doubled.meta["val"] = torch.empty(64, 64, device="meta")
    graph.output((doubled,))
    made = plan(graph)  # raised AttributeError: a HOP has no _schema
    # the call (a tuple: no bytes of its own) reads x; the subgraph's output gets a
    # buffer, freed after the scaling, the graph's output
    assert made.realized == [x, call, first, doubled]
    assert made.release == {call: [x], first: [call], doubled: [first]}

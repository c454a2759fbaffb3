"""Expert parallelism with a stated routing assumption (`--routing`, issue 36):
simulation/distributed/routing.py's counts worked out by hand, and the hand-written
expert-parallel layer of tests/simulate/ep_script.py at 2 and 4 ranks with exact bytes
per rank for each choice.

The layer: T = 64 tokens pick K = 2 of E = 2 x world experts (2 per rank), N = 128
choices, rows of 1,024 bytes. A rank that receives R rows holds at its peak the largest
of: its routed copy (131,072) and the index temporary (1,024); the routed copy and the
received rows; the received rows and the experts' output (2 x 1,024 R); the output and
the combined-back rows (1,024 R + 131,072); the back rows, the combined output (65,536)
and the index temporary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from memlens.cli.main import run
from memlens.errors import MemlensError
from memlens.simulation.distributed.routing import Routing, parse

torch = pytest.importorskip("torch")

from memlens.simulation.api import ScriptRun, run_script  # noqa: E402
from memlens.simulation.distributed.env import World  # noqa: E402

SCRIPT = str(Path(__file__).with_name("ep_script.py"))
ROW = 1_024


# ---------------------------------------------------------------- the counts, by hand
def test_counts_of_each_routing_worked_by_hand():
    # 64 tokens x 2 choices over 4 experts: 128 choices, at most 64 per expert
    assert parse("uniform").counts(64, 4, 2) == [32, 32, 32, 32]
    assert parse(None) == Routing()  # the default is uniform
    assert parse("uniform").counts(5, 3, 1) == [2, 2, 1]  # the remainder to the first
    # capacity 1.5: up to ceil(1.5 x 128 / 4) = 48 each, in expert order
    assert parse("capacity:1.5").counts(64, 4, 2) == [48, 48, 32, 0]
    assert parse("capacity:1").counts(64, 4, 2) == [32, 32, 32, 32]
    # a factor past E / K is capped at T: a token picks an expert once
    assert parse("capacity:8").counts(64, 4, 2) == [64, 64, 0, 0]
    assert parse("worst").counts(64, 4, 2) == [64, 64, 0, 0]
    assert parse("worst").counts(64, 4, 1) == [64, 0, 0, 0]


def test_histogram_rounds_by_largest_remainder_and_caps_at_the_tokens(tmp_path):
    weights = tmp_path / "w.json"
    weights.write_text("[1, 1, 1, 5]")
    # 16, 16, 16, 80 -> the last capped at 64, its 16 to expert 0
    assert parse(f"histogram:{weights}").counts(64, 4, 2) == [32, 16, 16, 64]
    csv = tmp_path / "w.csv"
    csv.write_text("expert,fraction\n0,0.5\n1,0.25\n2,0.25\n")
    # 5 x 0.5 = 2.5, 1.25, 1.25: floors 2, 1, 1, the one left to the largest remainder
    assert parse(f"histogram {csv}").counts(5, 3, 1) == [3, 1, 1]
    assert parse(f"histogram:{csv}").describe() == f"histogram {csv} (3 experts)"
    (tmp_path / "f.json").write_text('{"fractions": [0.75, 0.25]}')
    assert parse(f"histogram:{tmp_path / 'f.json'}").counts(4, 2, 1) == [3, 1]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("bogus", "--routing takes uniform, capacity:F"),
        ("capacity:0.5", "capacity factor '0.5' is not a number >= 1"),
        ("capacity:x", "capacity factor 'x' is not a number >= 1"),
        ("histogram", "--routing takes"),
        ("histogram:/no/such.json", "cannot read /no/such.json"),
    ],
)
def test_bad_routing_is_one_line_and_exit_2(value, message, capsys):
    with pytest.raises(MemlensError, match=message):
        parse(value)
    assert run(["simulate", "--routing", value, "x.py"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memlens: error: ") and message in lines[0]


def test_plan_passes_the_routing_to_every_point(capsys):
    from memlens.planning.plan import Setup

    assert Setup.of("t4", None, None, "capacity:2").config(None).routing == "capacity:2"
    assert Setup.of("t4", None, None).config(None).routing is None
    assert run(["plan", "--routing", "worst:3", __file__]) == 2
    assert "memlens: error: --routing takes" in capsys.readouterr().err


# ---------------------------------------------------------------- the EP layer
def run_rank(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    world: int,
    rank: int,
    routing: str | None,
    *args: str,
) -> tuple[dict[str, Any], ScriptRun]:
    for key, value in World(nproc_per_node=world).env(rank).items():
        monkeypatch.setenv(key, value)
    out = tmp_path / f"r{rank}.json"
    done = run_script(SCRIPT, [str(out), *args], tmp_path / "s.pickle", cublas_workspace=0,
                      routing=routing)  # fmt: skip
    marks: dict[str, Any] = json.loads(out.read_text())
    return marks, done


def expected_peak(rows: int) -> int:
    routed = 128 * ROW
    return max(routed + 1_024, routed + rows * ROW, 2 * rows * ROW, routed + 65_536 + 1_024)


@pytest.mark.parametrize(
    ("routing", "counts", "received_rows"),
    [
        ("uniform", [32, 32, 32, 32], [128, 128]),
        ("capacity:1.5", [48, 48, 32, 0], [192, 64]),
        ("worst", [64, 64, 0, 0], [256, 0]),
        ("histogram", [32, 16, 16, 64], [96, 160]),
    ],
)
def test_each_rank_receives_what_the_routing_sends_it_exactly(
    tmp_path, monkeypatch, routing, counts, received_rows
):
    if routing == "histogram":
        (tmp_path / "h.json").write_text("[1, 1, 1, 5]")
        routing = f"histogram:{tmp_path / 'h.json'}"
    got = [run_rank(tmp_path, monkeypatch, 2, r, routing)[0] for r in (0, 1)]
    for rank, marks in enumerate(got):
        assert marks["counts"] == counts
        assert marks["in"] == [sum(counts[:2]), sum(counts[2:])]
        assert sum(marks["out"]) == received_rows[rank]
        assert marks["received"] == received_rows[rank] * ROW
        assert marks["peak"] == expected_peak(received_rows[rank])
        assert marks["combined"] == [64, 256]
    # what rank s sends rank r is what r receives from s
    for s in (0, 1):
        for r in (0, 1):
            assert got[s]["in"][r] == got[r]["out"][s]


def test_worst_routing_at_four_ranks_sends_everything_to_rank_0(tmp_path, monkeypatch):
    got = [run_rank(tmp_path, monkeypatch, 4, r, "worst")[0] for r in range(4)]
    assert [sum(m["out"]) for m in got] == [512, 0, 0, 0]
    assert [m["peak"] for m in got] == [expected_peak(512)] + [expected_peak(0)] * 3
    assert got[0]["peak"] == 1_048_576
    assert all(got[s]["in"][r] == got[r]["out"][s] for s in range(4) for r in range(4))


def test_torchtitans_functional_collectives_give_the_same_bytes(tmp_path, monkeypatch):
    """all_to_all_single of the counts, wait_tensor, all_to_all_single_autograd: the
    same splits and bytes as c10d's form (wait_tensor answers its argument, as its
    kernel does, not a copy)."""
    got = [run_rank(tmp_path, monkeypatch, 2, r, "capacity:1.5", "--functional")[0] for r in (0, 1)]
    assert [m["out"] for m in got] == [[96, 96], [32, 32]]
    assert [m["received"] for m in got] == [192 * ROW, 64 * ROW]
    assert [m["peak"] for m in got] == [expected_peak(192), expected_peak(64)]


def test_bincount_counts_a_size_from_values(tmp_path, monkeypatch):
    marks, _ = run_rank(tmp_path, monkeypatch, 2, 0, "worst", "--bincount")
    assert marks["counts"] == [64, 64, 0, 0] and marks["out"] == [128, 128]
    assert marks["peak"] == expected_peak(256) == 524_288


MOE_LOOP = """
import json, sys, torch
T, K, D, E = 64, 2, 256, 4
x = torch.empty(T, D, device="cuda")
_, ids = torch.topk(torch.empty(T, E, device="cuda"), K, dim=-1)
counts = torch.bincount(ids.flatten(), minlength=E).tolist()
rows = []
for i in range(E):
    if counts[i] == 0:
        continue
    idx, top = torch.where(ids == i)
    before = torch.cuda.memory_allocated()
    y = x[idx]
    rows.append([i, y.shape[0], torch.cuda.memory_allocated() - before])
json.dump({"counts": counts, "rows": rows}, open(sys.argv[1], "w"))
"""


def test_one_gpu_moe_loop_over_experts_follows_the_routing(tmp_path, monkeypatch):
    """DeepSeek's inference MoE on one GPU: bincount's counts, then each expert's tokens
    by torch.where; each expert's rows replace the previous expert's."""
    (tmp_path / "moe.py").write_text(MOE_LOOP)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    out = tmp_path / "moe.json"
    run_script(tmp_path / "moe.py", [str(out)], tmp_path / "m.pickle", routing="capacity:1.5")
    got = json.loads(out.read_text())
    assert got["counts"] == [48, 48, 32, 0]
    assert got["rows"] == [[0, 48, 48 * ROW], [1, 48, 0], [2, 32, (32 - 48) * ROW]]


def test_histc_counts_and_the_assumption_in_notes_and_snapshot(tmp_path, monkeypatch):
    marks, done = run_rank(tmp_path, monkeypatch, 2, 0, None, "--histc")
    assert marks["counts"] == [32, 32, 32, 32]  # the default: uniform
    assert marks["peak"] == expected_peak(128) == 262_144
    described = "uniform (tokens spread evenly over the experts)"
    assert any(f"--routing {described}" in n for n in done.notes)
    assert done.whole["memlens_simulation"] == {"assumptions": {"routing": described}}


def test_a_run_without_experts_states_no_routing(tmp_path, monkeypatch):
    (tmp_path / "plain.py").write_text("import torch\ntorch.ones(4, device='cuda')\n")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    done = run_script(tmp_path / "plain.py", [], tmp_path / "p.pickle", routing="worst")
    assert "memlens_simulation" not in done.whole
    assert not any("routing" in n for n in done.notes)

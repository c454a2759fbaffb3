"""`memlens plan --what-if fsdp2=N --what-if ddp=N`: rank 0's peak against the single-GPU
baseline in the knob table, with the call sites that moved (tests/parallel_script.py;
the figures are worked out in tests/simulate/test_simulate_parallel_knobs.py)."""

from __future__ import annotations

import json
import textwrap

import pytest

pytest.importorskip("torch")

from cli_run import memlens_in  # noqa: E402
from parallel_script import SCRIPT  # noqa: E402

P = 526_336  # the MLP's parameters, bytes


def line(text: str) -> int:
    return SCRIPT.splitlines().index(text) + 1


def test_fsdp2_and_ddp_rows_give_rank_0s_saving_and_the_sites_that_moved(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    out = memlens_in(tmp_path, "plan", "--gpu", "a100", "--jobs", "2", "--json", "--what-if",
                     "ddp=2", "--what-if", "fsdp2=2", "train.py", "marks.json")  # fmt: skip
    table = json.loads(out)["knob_table"]
    # rows sort by the reserved saving: FSDP2's all-gather and reduce-scatter streams
    # each reserve a segment of their own (-2 MiB), and cuBLASLt's 1 MiB workspaces
    # (patches/cublas_lt.py) cost each rank, DDP's and FSDP2's alike, one 2 MiB segment
    # more than the single GPU (with TORCH_CUBLASLT_UNIFIED_WORKSPACE=1, no cuBLASLt
    # workspace, the two are 0 and -2 MiB)
    ddp, fsdp2 = table["rows"]
    assert (ddp["reserved_saving_bytes"], fsdp2["reserved_saving_bytes"]) == (-(2**21), -(2**22))
    # rank 0 of 2: 2,639,360 bytes at the single-GPU peak, 1,728,000 sharded, less 508
    # bytes per 4-byte scalar as the trace records them (the loss; the sharded peak also
    # holds its gradient)
    assert fsdp2["setting"] == "fsdp2=2"
    assert fsdp2["active_saving_bytes"] == (2_639_360 - 508) - (1_728_000 - 2 * 508) == 911_868
    # DDP's bucket: one more copy of every gradient
    assert ddp["setting"] == "ddp=2" and ddp["active_saving_bytes"] == -P
    assert fsdp2["applied"][0].startswith("fsdp2=2: fully_shard on Linear x2, then the root")
    assert ddp["applied"][0].startswith("ddp=2: DistributedDataParallel(Sequential)")
    # at the peaks: AdamW's step (moments 2P and two weight-sized temporaries, 1,052,672 +
    # 525,312 with the bias's denom) -> the sharded moments (P); the parameters made by
    # the model's .cuda() freed for the shards made where the optimizer is built (P / 2)
    moved = {(s["line"], s["change"]) for s in fsdp2["sites"]}
    assert (line("    opt.step()"), P - 1_577_984) in moved
    assert (line("    model = model.cuda()"), -P) in moved
    assert (line("opt = torch.optim.AdamW(params, foreach=False)"), P // 2) in moved
    (site,) = ddp["sites"]  # the bucket, made with the optimizer (DDP wraps there)
    assert (site["line"], site["change"]) == (
        line("opt = torch.optim.AdamW(params, foreach=False)"),
        P,
    )


def test_advise_checks_the_sharding_finding_with_fsdp2(tmp_path):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))

    def memlens(*args: str) -> str:
        return memlens_in(tmp_path, *args)

    memlens("simulate", "--gpu", "a100", "-o", "snap.pickle", "train.py", "marks.json")
    out = json.loads(memlens("advise", "snap.pickle", "--ranks", "2", "--script",
                             "train.py marks.json", "--gpu", "a100", "--json"))  # fmt: skip
    (i,) = [i for i, f in enumerate(out["findings"]) if f["kind"] == "sharding"]
    (check,) = [c for c in out["checks"] if c["kind"] == "sharding"]
    assert (check["finding"], check["knob"], check["compared"]) == (i, "fsdp2=2", "active")
    assert check["predicted_bytes"] == out["findings"][i]["bytes"]
    # the saving of test_fsdp2_and_ddp_rows_...: rank 0's peak active against the script's
    assert check["simulated_saving_bytes"] == 911_868 and check["note"] == ""
    assert check["applied"][0].startswith("fsdp2=2: fully_shard on Linear x2")

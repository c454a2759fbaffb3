"""`memlens plan --what-if` with code knobs: the ranked table of knobs at the heaviest
point, each knob's saving against the baseline, what it covered, and the call sites whose
bytes at the peak moved (tests/knob_scripts.py's MLP; its figures are worked out in
tests/simulate/test_simulate_knobs.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("torch")

from knob_scripts import MLP  # noqa: E402

MiB = 2**20
# bf16 on a T4 (sm75) fails as on the card: the failed row comes last
KNOBS = ("checkpoint=Block", "autocast=fp16", "autocast=bf16", "checkpoint=Nope", "fused=true")


def plan(tmp_path, *extra: str) -> Any:
    (tmp_path / "mlp.py").write_text(textwrap.dedent(MLP))
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    what_ifs = [a for k in KNOBS for a in ("--what-if", k)]
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "plan", "--gpu", "t4", "--jobs", "2", *what_ifs,
         *extra, "mlp.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if "--json" in extra else done.stdout


def test_knob_table_ranks_savings_and_names_the_sites_that_moved(tmp_path):
    out = plan(tmp_path, "--json")
    assert [(w["setting"], w["kind"]) for w in out["what_ifs"]] == [(k, "code") for k in KNOBS]
    table = out["knob_table"]
    assert table["point"] == 0 and table["values"] == {}
    base_a, base_r = table["baseline_peak_active_bytes"], table["baseline_peak_reserved_bytes"]
    assert (base_a, base_r) == (out["points"][0]["peak_active_bytes"],
                                out["points"][0]["peak_reserved_bytes"])  # fmt: skip
    rows = {r["setting"]: r for r in table["rows"]}
    # peak active without the cuBLAS workspace is 20 MiB, checkpointed 14, autocast 18
    assert rows["checkpoint=Block"]["active_saving_bytes"] == 6 * MiB
    assert rows["autocast=fp16"]["active_saving_bytes"] == 2 * MiB
    failed = table["rows"][-1]
    assert failed["setting"] == "autocast=bf16" and failed["reserved_saving_bytes"] == 0
    assert "does not support bfloat16" in failed["error"] and failed["fits"] is None
    assert rows["checkpoint=Block"]["active_saving_pct"] == pytest.approx(600 * MiB / base_a)
    for r in table["rows"][:-1]:
        assert r["reserved_saving_bytes"] == base_r - r["peak_reserved_bytes"]
        assert r["error"] is None and r["fits"] is True
    savings = [r["reserved_saving_bytes"] for r in table["rows"][:-1]]
    assert savings == sorted(savings, reverse=True)
    # the knobs that did not apply say so, and move nothing
    for knob in ("checkpoint=Nope", "fused=true"):
        assert rows[knob]["active_saving_bytes"] == rows[knob]["reserved_saving_bytes"] == 0
        assert rows[knob]["sites"] == []
        assert "not applied" in rows[knob]["applied"][0]
    assert rows["checkpoint=Block"]["applied"] == [
        "checkpoint=Block: forward checkpointed (use_reentrant=False): Block x4"
    ]
    # the three relu outputs no longer held: Block.forward's line, 6 MiB less at the peak
    line = MLP.splitlines().index("        return self.down(torch.relu(self.up(x)))") + 1
    (site,) = rows["checkpoint=Block"]["sites"]
    assert (site["name"], site["line"], site["change"]) == ("forward", line, -6 * MiB)
    assert site["filename"].endswith("mlp.py") and site["status"] == "both"
    assert site["a_bytes"] - site["b_bytes"] == 6 * MiB

    text = plan(tmp_path)  # every point from the cache
    assert "1 simulations run" in text  # a failed point is not cached
    assert "knobs at (as given), ranked by peak reserved saved" in text
    assert "checkpoint=Nope: not applied: no module class matched 'Nope'" in text
    assert f"-6.00 MiB at the peak: forward ({tmp_path / 'mlp.py'}:{line})" in text


def test_a_combination_is_ranked_with_each_knob_alone(tmp_path):
    """autocast=fp16 and checkpoint=Block together on the MLP (peak active without the
    workspace: 20 MiB as written, 14 checkpointed, 18 under autocast). Together, at the
    last block's relu: 8 (weights) + 0.5 (x) + 7 x 0.5 (fp16 weight casts, held by
    autocast's cache even inside a checkpoint) + 3 x 0.25 (fp16 block outputs, the next
    checkpoints' inputs) + 1 + 1 (that block's fp16 hidden and relu output) = 14.75 MiB:
    5.25 MiB saved, less than checkpointing alone (the casts cost more than halving the
    few activations left). The x cast is not held: only a saved input would keep it."""
    (tmp_path / "mlp.py").write_text(textwrap.dedent(MLP))
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "plan", "--gpu", "t4", "--jobs", "2", "--json",
         "--what-if", "checkpoint=Block", "--what-if", " autocast=FP16 , checkpoint=Block",
         "mlp.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    # baseline, two what-ifs, autocast alone; checkpoint=Block alone is its own what-if
    assert out["simulations"] == 4 and "what-if autocast=fp16 alone" in done.stderr
    rows = {r["setting"]: r for r in out["knob_table"]["rows"]}
    base_r = out["knob_table"]["baseline_peak_reserved_bytes"]
    both = rows["autocast=fp16,checkpoint=Block"]
    assert both["kind"] == "code" and both["active_saving_bytes"] == 5 * MiB + MiB // 4
    assert [(p["setting"], p["active_saving_bytes"], p["error"]) for p in both["parts"]] == [
        ("autocast=fp16", 2 * MiB, None),
        ("checkpoint=Block", 6 * MiB, None),
    ]
    assert (
        both["parts"][1]["reserved_saving_bytes"]
        == rows["checkpoint=Block"]["reserved_saving_bytes"]
    )
    assert both["reserved_saving_bytes"] == base_r - both["peak_reserved_bytes"]
    assert rows["checkpoint=Block"]["parts"] == []
    assert both["applied"] == [
        "autocast=fp16: 1 outermost module calls under torch.autocast('cuda'); code outside "
        "modules ran as written",
        "checkpoint=Block: forward checkpointed (use_reentrant=False): Block x4",
    ]

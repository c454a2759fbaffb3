"""`memlens advise SNAPSHOT --script SCRIPT`: each finding a knob answers, simulated
without and with the knob, the simulated saving beside the estimate (planning.verify)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

MiB = 2**20

# A 16 MiB tensor (its own segment), a 4 MiB one in a 20 MiB segment, and a hand-written
# attention whose (2, 4, 256, 256) fp32 scores and softmax (2 MiB each) are live together.
# expandable_segments maps the large pool 20 MiB at a time: reserved falls by 8 MiB, in the
# replay of the snapshot and in the simulation alike.
SCRIPT = """
import torch
import torch.nn.functional as F

MiB = 2**20
w = torch.empty(4 * MiB, device="cuda")
z = torch.empty(MiB, device="cuda")


def attention(q, k):
    scores = q @ k.transpose(-1, -2)
    return F.softmax(scores, dim=-1)


q = torch.empty(2, 4, 256, 64, device="cuda")
p = attention(q, q)
"""


def memlens(tmp_path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    return subprocess.run([sys.executable, "-m", "memlens", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=600)  # fmt: skip


def test_findings_checked_by_simulation(tmp_path):
    (tmp_path / "s.py").write_text(textwrap.dedent(SCRIPT))
    done = memlens(tmp_path, "simulate", "--gpu", "h100", "-o", "snap.pickle", "s.py")
    assert done.returncode == 0, done.stderr
    done = memlens(tmp_path, "advise", "snap.pickle", "--script", "s.py", "--gpu", "h100",
                   "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [f["kind"] for f in out["findings"]] == ["fragmentation", "attention"]
    frag, attention = out["checks"]
    assert frag == {
        "finding": 0, "kind": "fragmentation", "knob": "expandable_segments:True",
        "compared": "reserved", "predicted_bytes": 8 * MiB,
        "simulated_saving_bytes": 8 * MiB, "simulated_baseline_bytes": 70 * MiB,
        "applied": [], "note": "",
    }  # fmt: skip
    # the attention is hand-written: forcing an SDPA backend changes nothing, and says so
    assert attention["knob"] == "sdpa=efficient" and attention["predicted_bytes"] == 4 * MiB
    assert attention["simulated_saving_bytes"] == 0 and attention["compared"] == "active"
    assert attention["applied"] == [
        "sdpa=efficient: not applied: no scaled_dot_product_attention call on cuda"
    ]
    assert "did not apply" in attention["note"]

    text = memlens(tmp_path, "advise", "snap.pickle", "--script", "s.py", "--gpu", "h100")
    assert text.returncode == 0, text.stderr
    assert ("1. fragmentation: predicted 8.00 MiB, simulated 8.00 MiB with "
            "expandable_segments:True (peak reserved, baseline 70.00 MiB)") in text.stdout  # fmt: skip

    plain = json.loads(memlens(tmp_path, "advise", "snap.pickle", "--json").stdout)
    assert plain["checks"] == []


def test_bad_script_options_are_one_line(tmp_path):
    (tmp_path / "s.py").write_text(textwrap.dedent(SCRIPT))
    assert memlens(tmp_path, "simulate", "-o", "snap.pickle", "s.py").returncode == 0
    for extra, message in (
        (["--gpu", "h100"], "give --script too"),
        (["--script", "missing.py"], "no such script: missing.py"),
        (["--script", "s.py", "--gpu", "nosuchcard"], "nosuchcard"),
        (["--script", "'s.py"], "--script"),
    ):
        done = memlens(tmp_path, "advise", "snap.pickle", *extra)
        assert done.returncode == 2, (extra, done.stderr)
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr

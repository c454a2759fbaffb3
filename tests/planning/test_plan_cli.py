"""`memlens plan` end to end on a script whose memory is known exactly (issue 23): the
peaks of each point, what fits a T4, the fit's prediction at a held-out point, the
bisection's answer and its count of simulations, a what-if, and the cache on a re-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("torch")

from memlens.simulation.api import run_script  # noqa: E402

MiB = 2**20

# Every tensor of 16 MiB or more is its own segment of exactly its size (large pool, a
# multiple of 2 MiB); the 4 MiB one (1-10 MiB) gets a 20 MiB segment. Nothing is freed, no
# matmul (no cuBLAS workspace). So at batch b:
#   peak active   = 16 MiB x (1 + b + b^2) + 4 MiB
#   peak reserved = 16 MiB x (1 + b + b^2) + 20 MiB
# With expandable_segments the large pool maps 20 MiB at a time (kLargeBuffer): reserved
# = active rounded up to 20 MiB. A T4 has 15360 MiB, less the 512 MiB reserve = 14848 MiB
# usable: b = 29 takes 13956 MiB, b = 30 takes 14916 MiB.
TOY = """
import argparse, torch
p = argparse.ArgumentParser(); p.add_argument("--batch-size", type=int, default=1)
n = p.parse_args().batch_size
MiB = 2**20
w = torch.empty(4 * MiB, device="cuda")
x = torch.empty(n * 4 * MiB, device="cuda")
y = torch.empty(n * n * 4 * MiB, device="cuda")
z = torch.empty(MiB, device="cuda")
print("the script's own output: not in the plan's --json")
"""


def active(b: int) -> int:
    return 16 * MiB * (1 + b + b * b) + 4 * MiB


def reserved(b: int) -> int:
    return 16 * MiB * (1 + b + b * b) + 20 * MiB


def plan(tmp_path, *extra: str) -> tuple[Any, str]:
    (tmp_path / "toy.py").write_text(textwrap.dedent(TOY))
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "plan", "--gpu", "t4", "--jobs", "2", *extra, "toy.py"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return (json.loads(done.stdout) if "--json" in extra else done.stdout), done.stderr


ARGS = ("--sweep", "--batch-size=1,2,4", "--predict", "--batch-size=29",
        "--find-max", "--batch-size", "--lo", "1", "--hi", "32",
        "--what-if", "expandable_segments")  # fmt: skip


def test_sweep_fit_find_max_what_if_and_cache(tmp_path):
    out, err = plan(tmp_path, *ARGS, "--json")
    assert out["usable_bytes"] == 14848 * MiB and out["reserve_bytes"] == 512 * MiB
    points = out["points"]
    assert [p["values"] for p in points] == [{"--batch-size": b} for b in ("1", "2", "4")]
    assert [(p["peak_active_bytes"], p["peak_reserved_bytes"]) for p in points] == [
        (active(b), reserved(b)) for b in (1, 2, 4)
    ]
    assert [(p["fits"], p["oom"], p["cached"]) for p in points] == [(True, False, False)] * 3
    assert out["largest_fitting"] == {"--batch-size": "4"}

    fit = out["fit"]
    assert fit["constant_bytes"] == pytest.approx(36 * MiB, abs=1)
    assert fit["linear_bytes"] == [pytest.approx(16 * MiB, abs=1)]
    assert fit["quadratic_bytes"] == [pytest.approx(16 * MiB, abs=1)]
    assert fit["largest_fitting"] == 29
    fit_active = out["fit_active"]
    assert fit_active["constant_bytes"] == pytest.approx(20 * MiB, abs=1)
    assert fit_active["quadratic_bytes"] == [pytest.approx(16 * MiB, abs=1)]
    assert fit_active["largest_fitting"] is None  # only the reserved fit is held to the card
    (pred,) = out["predictions"]
    assert pred["extrapolated"] is True  # 29 is beyond the swept 1..4

    # Bisection: 32 (too big), 1 (from the sweep's cache), then 16, 24, 28, 30, 29:
    # ceil(log2(32 - 1)) = 5 midpoints, 6 simulations.
    found = out["find_max"]
    assert found["largest_fitting"] == 29
    assert [p["values"]["--batch-size"] for p in found["probes"]] == [
        "32", "1", "16", "24", "28", "30", "29",
    ]  # fmt: skip
    assert [p["fits"] for p in found["probes"]] == [False, True, True, True, True, False, True]
    assert found["probes"][0]["oom"] is True
    assert found["simulations"] == 6
    # the held-out point the bisection simulated is where the fit said
    probe29 = found["probes"][-1]
    assert probe29["peak_reserved_bytes"] == reserved(29)
    assert pred["peak_reserved_bytes"] == pytest.approx(reserved(29), abs=1)
    assert probe29["peak_active_bytes"] == active(29)
    assert pred["peak_active_bytes"] == pytest.approx(active(29), abs=1)

    (knob,) = out["what_ifs"]
    assert knob["setting"] == "expandable_segments:True"
    # active rounded up to 20 MiB: 52 -> 60, 116 -> 120, 340 -> 340
    expandable = [60 * MiB, 120 * MiB, 340 * MiB]
    assert [p["peak_reserved_bytes"] for p in knob["points"]] == expandable
    assert knob["reserved_change_bytes"] == [
        e - reserved(b) for e, b in zip(expandable, (1, 2, 4), strict=True)
    ]
    assert knob["active_change_bytes"] == [0, 0, 0]
    assert out["simulations"] == 3 + 3 + 6
    assert "[3/3] --batch-size=4 simulated" in err

    again, _ = plan(tmp_path, *ARGS, "--json")
    assert again["simulations"] == 0
    assert all(p["cached"] for p in again["points"])
    strip = ("cached", "probes", "simulations", "points", "what_ifs", "find_max")
    assert {k: v for k, v in again.items() if k not in strip} == {
        k: v for k, v in out.items() if k not in strip
    }
    assert [p["peak_reserved_bytes"] for p in again["find_max"]["probes"]] == [
        p["peak_reserved_bytes"] for p in found["probes"]
    ]

    text, _ = plan(tmp_path, "--sweep", "--batch-size=1,2,4")
    assert (
        "  --batch-size=4: peak active 340.00 MiB, peak reserved 356.00 MiB, fits [cached]" in text
    )
    assert "largest fitting: --batch-size=4" in text and "0 simulations run" in text


def test_a_point_agrees_with_a_single_simulation(tmp_path, monkeypatch):
    (tmp_path / "toy.py").write_text(textwrap.dedent(TOY))
    monkeypatch.chdir(tmp_path)
    run = run_script("toy.py", ["--batch-size", "4"], tmp_path / "one.pickle", gpu="t4")
    import memlens

    dev = memlens.load(run.whole, warn=False).device(0)
    assert (dev.peak_active_bytes, dev.peak_reserved_bytes) == (active(4), reserved(4))


def test_bad_input_is_one_line(tmp_path):
    (tmp_path / "toy.py").write_text("")
    for extra, message in (
        (["--sweep", "--batch-size"], "expected 'ARG=V1,V2,...'"),
        (["--what-if", "nonsense"], "KEY:VALUE"),
        (["--gpu", "t4", "--find-max", "--b", "--lo", "9", "--hi", "3"], "1 <= --lo <= --hi"),
        (["--find-max", "--b"], "needs a capacity"),
    ):
        done = subprocess.run([sys.executable, "-m", "memlens", "plan", *extra, "toy.py"],
                              capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 2 and done.stderr.startswith("memlens: error: ")
        assert message in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_failing_point_is_reported_and_not_cached(tmp_path):
    (tmp_path / "bad.py").write_text(textwrap.dedent("""
        import sys, torch
        x = torch.empty(2**20, device="cuda")  # 4 MiB: a 20 MiB segment
        if sys.argv[-1] == "2":
            raise ValueError("no batch of 2")
    """))  # fmt: skip
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "memlens", "plan", "--gpu", "t4", "--json", "--jobs", "1",
           "--sweep", "--b=1,2", "bad.py"]  # fmt: skip
    for simulations in (2, 1):  # the failed point is simulated again, the good one is not
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        out = json.loads(done.stdout)
        good, bad = out["points"]
        assert (good["peak_active_bytes"], good["peak_reserved_bytes"], good["fits"]) == (
            4 * MiB, 20 * MiB, True,
        )  # fmt: skip
        assert bad["fits"] is None and "ValueError: no batch of 2" in bad["error"]
        assert out["simulations"] == simulations


# `--pattern` as the cs336 script takes it: a forward holds 16 MiB x (1 + c) (weights and
# one activation per context unit), a training step also a 16 MiB x c^2 "attention
# gradient". Each tensor is its own segment of exactly its size: active = reserved.
PATTERNS = """
import argparse, torch
p = argparse.ArgumentParser()
p.add_argument("--context", type=int, default=1)
p.add_argument("--pattern", choices=["forward-only", "full-training-step"], default="forward-only")
a = p.parse_args()
MiB = 2**20
w = torch.empty(4 * MiB, device="cuda")
x = torch.empty(a.context * 4 * MiB, device="cuda")
if a.pattern == "full-training-step":
    g = torch.empty(a.context * a.context * 4 * MiB, device="cuda")
"""


def test_a_non_numeric_sweep_is_fitted_per_value(tmp_path):
    """--pattern forward-only vs full-training-step over --context 1,2,4,8 on 1000 MiB
    (no reserve): the training step at 8 needs 16 x 73 = 1168 MiB and runs out; each
    pattern gets its own fit. Forward: 16 + 16 c MiB, largest c with 16 (1 + c) <= 1000 is
    61; training: 16 (1 + c + c^2), fitted over the three points that ran, largest 7
    (16 x 57 = 912; 8 gives 1168)."""
    (tmp_path / "cs.py").write_text(textwrap.dedent(PATTERNS))
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    cmd = [sys.executable, "-m", "memlens", "plan", "--device-memory", "1000MiB",
           "--reserve", "0", "--jobs", "2", "--sweep", "--pattern=forward-only,full-training-step",
           "--sweep", "--context=1,2,4,8"]  # fmt: skip
    done = subprocess.run([*cmd, "--json", "cs.py"], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    peaks = [(p["values"]["--pattern"], int(p["values"]["--context"]), p["peak_active_bytes"],
              p["peak_reserved_bytes"], p["fits"]) for p in out["points"]]  # fmt: skip
    fwd = [("forward-only", c, 16 * MiB * (1 + c), 16 * MiB * (1 + c), True) for c in (1, 2, 4, 8)]
    assert peaks[:4] == fwd
    train = [("full-training-step", c, 16 * MiB * (1 + c + c * c)) for c in (1, 2, 4)]
    assert [p[:4] for p in peaks[4:7]] == [(*t, t[2]) for t in train]
    assert peaks[7][4] is False and out["points"][7]["oom"] is True
    # no single polynomial over a pattern and a number
    assert out["fit"] is None and out["largest_fitting"] is None
    forward, training = out["groups"]
    assert forward["values"] == {"--pattern": "forward-only"}
    assert forward["largest_fitting"] == {"--context": "8"}
    assert forward["fit"]["points"] == 4 and forward["fit"]["largest_fitting"] == 61
    assert forward["fit"]["constant_bytes"] == pytest.approx(16 * MiB, abs=1)
    assert forward["fit"]["linear_bytes"] == [pytest.approx(16 * MiB, abs=1)]
    assert forward["fit"]["quadratic_bytes"] == [pytest.approx(0, abs=1)]
    assert training["values"] == {"--pattern": "full-training-step"}
    assert training["largest_fitting"] == {"--context": "4"}
    assert training["fit"]["points"] == 3 and training["fit"]["largest_fitting"] == 7
    assert training["fit_active"]["quadratic_bytes"] == [pytest.approx(16 * MiB, abs=1)]

    text = subprocess.run([*cmd, "cs.py"], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=600).stdout  # fmt: skip
    assert "--pattern=full-training-step --context=8: peak active" in text
    assert "--pattern=full-training-step:\n  largest fitting: --context=4\n" in text
    assert "  fit of peak reserved over 3 points: 16.00 MiB + 16.00 MiB x --context" in text
    assert "    the fit's largest fitting --context: 7\n" in text

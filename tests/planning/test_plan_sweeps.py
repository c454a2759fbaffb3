"""`memlens plan` on scripts configured by environment variables (`--sweep-env`) and by a
config file (`--sweep-hook`), and its points on a real Dask cluster (`--scheduler`): the
same figures, byte for byte, as on the local pool (issue 23)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

MiB = 2**20

# Two tensors of 16 MiB or more: each its own segment of exactly its size (large pool, a
# multiple of 2 MiB), nothing freed, no matmul. At TOY_BATCH=n: peak active = peak
# reserved = 16 MiB x (1 + n). With expandable_segments the large pool maps 20 MiB at a
# time: reserved = active rounded up to 20 MiB (32 -> 40, 48 -> 60, 80 -> 80).
ENV_TOY = """
import os, torch
n = int(os.environ.get("TOY_BATCH", "1"))
MiB = 2**20
w = torch.empty(4 * MiB, device="cuda")
x = torch.empty(n * 4 * MiB, device="cuda")
print("the script's own output")
"""

# Configured by a JSON file named on the command line: {"rows": R} -> R x 16 MiB, plus the
# 16 MiB weight.
CONFIG_TOY = """
import json, sys, torch
rows = json.load(open(sys.argv[sys.argv.index("--config") + 1]))["rows"]
w = torch.empty(4 * 2**20, device="cuda")
x = torch.empty(rows * 4 * 2**20, device="cuda")
"""

# Writes the point's config file (named after its content: the cache key is the hook's
# return value) and points the script at it; TOY_UNUSED shows the env reaches the point.
HOOK = """
import json
def configure(values, args):
    rows = 2 * int(values["size"])
    path = f"cfg-{rows}.json"
    with open(path, "w") as f:
        json.dump({"rows": rows}, f)
    return {"args": [*args, "--config", path], "env": {"TOY_UNUSED": values["size"]}}
"""


def peaks(out: dict[str, Any]) -> list[tuple[int, int]]:
    return [(p["peak_active_bytes"], p["peak_reserved_bytes"]) for p in out["points"]]


def plan(tmp_path: Path, *extra: str, cache: str = "cache") -> tuple[dict[str, Any], str]:
    env = {**os.environ, "MEMLENS_CACHE_DIR": str(tmp_path / cache)}
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    env.pop("TOY_BATCH", None)
    done = subprocess.run(
        [sys.executable, "-m", "memlens", "plan", "--gpu", "t4", "--jobs", "2", "--json", *extra],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), done.stderr


def test_sweep_env_sizes_the_tensor_and_is_part_of_the_cache_key(tmp_path):
    (tmp_path / "envtoy.py").write_text(textwrap.dedent(ENV_TOY))
    out, _ = plan(tmp_path, "--sweep-env", "TOY_BATCH=1,2,4", "envtoy.py")
    assert [(p["values"], p["env"], p["argv"]) for p in out["points"]] == [
        ({"TOY_BATCH": b}, {"TOY_BATCH": b}, []) for b in ("1", "2", "4")
    ]
    assert peaks(out) == [(32 * MiB, 32 * MiB), (48 * MiB, 48 * MiB), (80 * MiB, 80 * MiB)]
    assert out["largest_fitting"] == {"TOY_BATCH": "4"}
    assert out["fit"]["linear_bytes"] == [pytest.approx(16 * MiB, abs=1)]
    assert out["simulations"] == 3
    # a new value is simulated, the others come from the cache: the env is in the key;
    # the bisection sets the variable too (its first probe, 8, is the sweep's point)
    again, _ = plan(tmp_path, "--sweep-env", "TOY_BATCH=2,8", "--find-max", "TOY_BATCH",
                    "--hi", "8", "envtoy.py")  # fmt: skip
    assert [p["cached"] for p in again["points"]] == [True, False]
    assert peaks(again) == [(48 * MiB, 48 * MiB), (144 * MiB, 144 * MiB)]
    assert again["simulations"] == 1
    (probe,) = again["find_max"]["probes"]
    assert (probe["env"], probe["argv"], probe["cached"]) == ({"TOY_BATCH": "8"}, [], True)
    assert again["find_max"]["largest_fitting"] == 8


def test_sweep_env_with_a_script_argument_sweep(tmp_path):
    """The cartesian product of an argument and a variable; the argument is appended."""
    (tmp_path / "envtoy.py").write_text(textwrap.dedent(ENV_TOY))
    out, _ = plan(tmp_path, "--sweep", "--unused=a,b", "--sweep-env", "TOY_BATCH=1,3", "envtoy.py")
    assert [(p["argv"], p["env"]) for p in out["points"]] == [
        (["--unused", u], {"TOY_BATCH": b}) for u in ("a", "b") for b in ("1", "3")
    ]
    assert peaks(out) == [(32 * MiB, 32 * MiB), (64 * MiB, 64 * MiB)] * 2


def test_sweep_hook_writes_a_config_per_point(tmp_path):
    (tmp_path / "cfgtoy.py").write_text(textwrap.dedent(CONFIG_TOY))
    (tmp_path / "hook.py").write_text(textwrap.dedent(HOOK))
    out, _ = plan(tmp_path, "--sweep", "size=1,2", "--sweep-hook", "hook.py:configure",
                  "--find-max", "size", "--lo", "1", "--hi", "4", "cfgtoy.py", "--seed", "0")  # fmt: skip
    # size s: 2s rows of 16 MiB and the 16 MiB weight
    assert [(p["values"], p["argv"], p["env"]) for p in out["points"]] == [
        ({"size": "1"}, ["--seed", "0", "--config", "cfg-2.json"], {"TOY_UNUSED": "1"}),
        ({"size": "2"}, ["--seed", "0", "--config", "cfg-4.json"], {"TOY_UNUSED": "2"}),
    ]
    assert peaks(out) == [(48 * MiB, 48 * MiB), (80 * MiB, 80 * MiB)]
    found = out["find_max"]  # the bisection's values go through the hook too
    assert found["largest_fitting"] == 4 and found["probes"][0]["argv"][-1] == "cfg-8.json"
    assert found["probes"][0]["peak_reserved_bytes"] == 144 * MiB


def test_bad_hooks_and_env_sweeps_are_one_line(tmp_path):
    (tmp_path / "toy.py").write_text("")
    (tmp_path / "hook.py").write_text("def bad(values, args):\n    return ['--x']\n")
    for extra, message in (
        (["--sweep-env", "1X=1,2"], "is not a variable name"),
        (["--sweep-env", "X"], "expected 'NAME=V1,V2,...'"),
        (["--sweep-hook", "nohook"], "expected FILE.py:FUNCTION"),
        (["--sweep-hook", "missing.py:f"], "no such file"),
        (["--sweep-hook", "hook.py:absent"], "has no function absent"),
        (["--sweep", "n=1", "--sweep-hook", "hook.py:bad"], "return a dict with 'args'"),
    ):
        done = subprocess.run([sys.executable, "-m", "memlens", "plan", *extra, "toy.py"],
                              capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
        assert done.returncode == 2 and done.stderr.startswith("memlens: error: "), done.stderr
        assert message in done.stderr and len(done.stderr.splitlines()) == 1


def test_points_on_a_dask_cluster_equal_the_local_pool(tmp_path, dask_processes):
    """A `dask scheduler` and two workers started in / (as on another machine): the script
    is sent by its absolute path; every figure, call sites included, equals the pool's."""
    pytest.importorskip("distributed")
    (tmp_path / "envtoy.py").write_text(textwrap.dedent(ENV_TOY))
    args = ("--sweep-env", "TOY_BATCH=1,2,4", "--what-if", "expandable_segments", "envtoy.py")
    local, _ = plan(tmp_path, *args, cache="local")
    remote, err = plan(tmp_path, "--scheduler", dask_processes, *args, cache="remote")
    assert local["executor"] == "local pool (2 processes)"
    assert remote["executor"] == f"Dask cluster at {dask_processes}"
    assert "what-if expandable_segments:True: TOY_BATCH=4 simulated" in err
    assert remote["simulations"] == 6
    assert {k: v for k, v in remote.items() if k != "executor"} == {
        k: v for k, v in local.items() if k != "executor"
    }
    assert peaks(remote) == [(32 * MiB, 32 * MiB), (48 * MiB, 48 * MiB), (80 * MiB, 80 * MiB)]
    (knob,) = remote["what_ifs"]
    assert [p["peak_reserved_bytes"] for p in knob["points"]] == [40 * MiB, 60 * MiB, 80 * MiB]

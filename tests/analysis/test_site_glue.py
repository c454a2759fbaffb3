"""The call site is the user's line: thin third-party glue (einops, bitsandbytes, PEFT's
layers, accelerate's hooks, ...) yields to the frame that called it and stays visible as
"via"; --hide adds to the default patterns, --hide-only replaces them. On hand-built
stacks, and on the shared cs336, wedson and fine-tuning snapshots when present."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import memlens
from memlens import DeviceTrace
from memlens.analysis.diff import diff
from memlens.analysis.peak import peak
from memlens.analysis.sites import SITE_HIDE_PATTERNS, top_sites
from memlens.cli.main import cli
from memlens.snapshot.frames import DEFAULT_HIDE_PATTERNS
from snapshot_builders import block, ev, segment

SP = "/venv/lib/python3.11/site-packages"
TORCH = {"filename": f"{SP}/torch/functional.py", "line": 407, "name": "einsum"}
GLUE = {"filename": f"{SP}/einops/_backends.py", "line": 288, "name": "einsum"}
GLUE_OUTER = {"filename": f"{SP}/einops/einops.py", "line": 916, "name": "einsum"}
USER = {"filename": "/home/u/model.py", "line": 22, "name": "forward"}
MAIN = {"filename": "/home/u/train.py", "line": 5, "name": "<module>"}


def glue_snapshot() -> dict[str, Any]:
    """0x1000: 1 MiB through einops from model.py:22; 0x200000: 2 MiB from einops with no
    user frame above it (glue alone keeps its name); 0x400000: 4 MiB from model.py directly."""
    trace = [
        ev("alloc", 0x1000, 1 << 20, 1, frames=[TORCH, GLUE, GLUE_OUTER, USER, MAIN]),
        ev("alloc", 0x200000, 2 << 20, 2, frames=[TORCH, GLUE, GLUE_OUTER]),
        ev("alloc", 0x400000, 4 << 20, 3, frames=[TORCH, USER, MAIN]),
    ]
    blocks = [block(0x1000, 1 << 20, 1 << 20, "active_allocated"),
              block(0x200000, 2 << 20, 2 << 20, "active_allocated"),
              block(0x400000, 4 << 20, 4 << 20, "active_allocated")]  # fmt: skip
    return {"segments": [segment(0x1000, blocks)], "device_traces": [trace]}


def sites_of(
    dev: DeviceTrace, hide: Sequence[str] | None = None
) -> list[tuple[str, int, str | None]]:
    rows = dev.live_at(dev.n_events - 1)
    return [(s["site"], s["bytes"], s["via"]) for s in top_sites(dev, rows, hide_patterns=hide)]


def test_glue_yields_to_the_line_that_called_it():
    dev = memlens.load(glue_snapshot()).device(0)
    assert sites_of(dev) == [
        (
            "forward (/home/u/model.py:22)",
            5 << 20,
            "einsum (/venv/lib/python3.11/site-packages/einops/_backends.py:288)",
        ),  # the 1 MiB via einops (more bytes than "no via")
        (f"einsum ({SP}/einops/_backends.py:288)", 2 << 20, None),  # no user frame above
    ]
    # the torch/stdlib rule alone: einops is the site, nothing is "via"
    assert sites_of(dev, DEFAULT_HIDE_PATTERNS) == [
        ("forward (/home/u/model.py:22)", 4 << 20, None),
        (f"einsum ({SP}/einops/_backends.py:288)", 3 << 20, None),
    ]
    # a user pattern on top of the defaults: the next frame out; "via" is the frame the
    # torch/stdlib rule names, of most bytes (4 MiB from model.py, 1 MiB through einops)
    assert sites_of(dev, [*SITE_HIDE_PATTERNS, r"model\.py$"])[0] == (
        "<module> (/home/u/train.py:5)",
        5 << 20,
        "forward (/home/u/model.py:22)",
    )


def test_hide_adds_to_the_defaults_and_hide_only_replaces_them(tmp_path):
    import pickle

    path = tmp_path / "glue.pickle"
    path.write_bytes(pickle.dumps(glue_snapshot()))

    def first_site(*args: str) -> str:
        r = CliRunner().invoke(cli, ["peak", str(path), "--json", *args])
        assert r.exit_code == 0, r.output
        return str(json.loads(r.stdout)["by_site"][0]["site"])

    assert first_site() == "forward (/home/u/model.py:22)"
    assert first_site("--hide", r"model\.py$") == "<module> (/home/u/train.py:5)"
    # --hide-only: exactly these patterns, so torch's own frame is the innermost shown
    assert first_site("--hide-only", "") == f"einsum ({SP}/torch/functional.py:407)"
    assert first_site("--hide-only", r"torch[/\\]") == "forward (/home/u/model.py:22)"
    text = CliRunner().invoke(cli, ["peak", str(path)]).stdout
    assert (f"  5.00 MiB        2x  forward (/home/u/model.py:22)  via einsum ({SP}/einops"
            "/_backends.py:288)") in text  # fmt: skip


def _real(shared_snapshots_dir: Path, name: str) -> DeviceTrace:
    path = shared_snapshots_dir / f"{name}.pickle"
    if not path.exists():
        pytest.skip(f"{name}.pickle is absent")
    return memlens.load(path).device()


CS336 = "/home/c-kaitwang/assignment1/cs336_basics/transformer.py"
CS336_EINOPS = (
    "einsum (/scratch/c-kaitwang/uv-envs/cs336-a2-systems/lib/python3.13/site-packages/"
    "einops/_backends.py:288)"
)


def test_cs336_names_the_users_line(shared_snapshots_dir):
    dev = _real(shared_snapshots_dir, "cs336_memory_ctx128_forward")
    sites = peak(dev, tree=False, top=30)["by_site"]
    assert sites[1]["site"] == f"forward ({CS336}:22)"
    assert (sites[1]["bytes"], sites[1]["count"], sites[1]["via"]) == (
        1_396_211_712,
        66,
        CS336_EINOPS,
    )
    assert not [s for s in sites if "einops" in s["site"]]
    # diff against the 512-token run: the largest change is the user's line too
    b = _real(shared_snapshots_dir, "cs336_memory_ctx512_forward")
    assert diff(dev, b)["sites"][0]["site"] == f"forward ({CS336}:22)"


def test_wedson_names_the_users_line(shared_snapshots_dir):
    dev = _real(shared_snapshots_dir, "wedson_medium_128_inference")
    sites = {s["site"]: s for s in peak(dev, tree=False, top=30)["by_site"]}
    model = "/home/lin/cs336/assignment2-systems/cs336-basics/cs336_basics/model.py"
    s = sites[f"forward ({model}:39)"]
    assert (s["bytes"], s["count"]) == (10_485_760, 2)
    assert s["via"] is not None and s["via"].endswith(
        "/.venv/lib/python3.12/site-packages/einops/_backends.py:291)"
    )
    assert not [k for k in sites if "einops" in k]


def test_finetune_names_the_model_line_not_bitsandbytes(shared_snapshots_dir):
    dev = _real(shared_snapshots_dir, "ftcourse_finetune")
    top = peak(dev, tree=False, top=30)["by_site"]
    sp = "/root/miniconda3/envs/py3.10/lib/python3.10/site-packages"
    assert top[0]["site"] == f"forward ({sp}/transformers/models/llama/modeling_llama.py:216)"
    assert (top[0]["bytes"], top[0]["count"]) == (1_982_464_000, 88)
    assert top[0]["via"] == f"forward ({sp}/bitsandbytes/autograd/_functions.py:509)"
    assert not [s for s in top if "bitsandbytes" in s["site"] or "peft" in s["site"]]

"""Agents can predict (issue 35): the MCP server's `estimate` tool answers from a config
without --allow-run (no user code runs), equal to `memlens estimate --json`; `simulate` and
`plan` exist only with --allow-run, run the script under the roots, and report progress
through the protocol's progress notifications. Driven through the MCP SDK's client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_mcp_server import call, drive, error

mcp = pytest.importorskip("mcp")
pytest.importorskip("torch")
pytest.importorskip("transformers")

# a tiny llama: the estimate runs in seconds
CONFIG = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
    "vocab_size": 256,
}  # fmt: skip

SCRIPT = """
import torch
x = torch.empty(1 << 20, device="cuda")          # 4 MiB
y = torch.empty(1 << 18, device="cuda")          # 1 MiB
del y
"""


def test_estimate_answers_without_allow_run_and_equals_the_command(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))
    out = subprocess.run(
        [sys.executable, "-m", "memlens", "estimate", str(config), "--batch", "2",
         "--seq-len", "32", "--gpu", "rtx4090", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    expected = json.loads(out.stdout)
    seen: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(str(message))

    async def body(s: Any) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert "estimate" in tools and tools["estimate"].annotations.read_only_hint is True
        assert "simulate" not in tools and "plan" not in tools
        r = await s.call_tool(
            "estimate", {"config": str(config), "batch": [2], "seq_len": [32], "gpu": ["rtx4090"]},
            progress_callback=progress,
        )  # fmt: skip
        assert not r.is_error, r.content[0].text
        assert r.structured_content == expected
        line = await error(s, "estimate", config=str(config), precision=["fp8"])
        assert (
            line
            == "memlens: error: precision: fp8 is not one of fp32, bf16-mixed, bf16, fp16-mixed, fp16"
        )
        line = await error(s, "estimate", config=str(config), gpu=["t4"])
        assert line == (
            "memlens: error: t4 has no bfloat16 (compute capability below 8.0): use "
            "--precision fp16-mixed or fp16 for it"
        )

    drive(body, "mcp", "--root", str(tmp_path))
    assert seen == ["simulating batch 2, 32 tokens, bf16-mixed on rtx4090"]


def test_estimate_reads_a_config_only_under_the_roots(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG))

    async def body(s: Any) -> None:
        line = await error(s, "estimate", config=str(config))
        assert (
            line == f"memlens: error: {config}: outside the folders this server may read ({root})"
        )

    drive(body, "mcp", "--root", str(root))


def test_simulate_runs_only_with_allow_run_and_opens_its_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "alloc.py"
    script.write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)  # the server's folder, where the script runs: under the root
    seen: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(str(message))

    async def body(s: Any) -> None:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        assert tools["simulate"].annotations.read_only_hint is False
        assert "plan" in tools
        r = await s.call_tool(
            "simulate", {"script": str(script), "gpu": "t4"}, progress_callback=progress
        )
        assert not r.is_error, r.content[0].text
        done = r.structured_content
        # 4 MiB and 1 MiB made, the 1 MiB one freed: peak 5 MiB active, 4 MiB at the end
        assert done["peak_active_bytes"] == 5 * 2**20
        summary = await call(s, "summary", snapshot=done["snapshot"])
        assert summary["devices"][0]["peak_active_bytes"] == 5 * 2**20

    drive(body, "mcp", "--allow-run", "--root", str(tmp_path))
    assert any(line.startswith("simulating") or "wrote" in line for line in seen), seen

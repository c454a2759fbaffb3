"""The MCP tools that predict GPU memory without a GPU, so an agent can answer "will it fit?":

- `estimate` (always offered): a Hugging Face causal LM from a config.json under the roots,
  or a model type and its sizes, simulated as `memlens estimate --json` does. No user code
  runs: the model is built by transformers' own classes (`AutoConfig.for_model`, no remote
  code) on fake CUDA tensors.
- `simulate` and `plan` (only with `memlens mcp --allow-run`): they run the user's script
  (under the roots, from this server's folder, also under the roots) as `memlens simulate` /
  `memlens plan --json` do, each in a child `python -m memlens` process: the script's
  imports and patches of torch never touch the server, and a stopped call kills the child.
  `simulate`'s snapshot is written to the server's own scratch folder and opened, so the
  analysis tools take its id next.

Each reports its progress lines (the command's `memlens: ...` stderr lines) through the
session's reporter, which the server turns into MCP progress notifications.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from memlens.agents.session import Session
from memlens.agents.tools import Tool, _check_names, _schema
from memlens.errors import MemlensError

PRECISIONS = ("fp32", "bf16-mixed", "bf16", "fp16-mixed", "fp16")
_INTS = {"type": "array", "items": {"type": "integer", "minimum": 1}}
_STRS = {"type": "array", "items": {"type": "string"}}


def _prop(kind: str, description: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "description": description, **extra}


ESTIMATE_PROPERTIES: dict[str, Any] = {
    "config": _prop("string", "A Hugging Face config.json (or its folder) under the roots."),
    "model_type": _prop("string", "Instead of config: a transformers model type (llama, ...)."),
    "hidden_size": _prop("integer", "hidden_size (over the config's or the type's default)."),
    "layers": _prop("integer", "num_hidden_layers."),
    "heads": _prop("integer", "num_attention_heads."),
    "kv_heads": _prop("integer", "num_key_value_heads."),
    "intermediate_size": _prop("integer", "intermediate_size."),
    "vocab_size": _prop("integer", "vocab_size."),
    "task": _prop("string", "Causal-LM training steps, or inference.", enum=["train", "inference"]),
    "batch": {**_INTS, "description": "Batch sizes per GPU (each a row). Default [1]."},
    "seq_len": {**_INTS, "description": "Tokens per sequence (each a row). Default [1024]."},
    "precision": {**_STRS, "description": f"Precisions (each a row): {', '.join(PRECISIONS)}."},
    "optimizer": _prop(
        "string", "adamw, adamw-fused (default), adamw-foreach, sgd, adafactor, ..."
    ),
    "gradient_checkpointing": _prop("boolean", "model.gradient_checkpointing_enable()."),
    "lora": _prop("integer", "LoRA of this rank through peft (0: none).", minimum=0),
    "prompt": {**_INTS, "description": "Inference: prompt tokens, decoded with the KV cache."},
    "generate": _prop("integer", "Inference: new tokens to decode (with prompt).", minimum=0),
    "world": _prop("integer", "GPUs (rank 0 is reported); with sharding.", minimum=1),
    "sharding": _prop("string", "With world > 1.", enum=["fsdp2", "ddp"]),
    "gpu": {**_STRS, "description": 'Cards to fit (each a row), e.g. ["rtx4090", "h100"].'},
}
SIZES = ("hidden_size", "layers", "heads", "kv_heads", "intermediate_size", "vocab_size")


def estimate_tool() -> Tool:
    schema = _schema(dict(ESTIMATE_PROPERTIES), [])

    def run(session: Session, args: dict[str, Any]) -> Any:
        from memlens.simulation.estimate_sweep import make_task, result, sweep

        _check_names("estimate", args, schema)
        config = args.get("config")
        if config is not None:
            config = str(session.allowed(str(config)))  # read under the roots only
        train = args.get("task", "train") == "train"
        prompt = args.get("prompt")
        job = make_task(
            config, args.get("model_type"), {k: args.get(k) for k in SIZES}, train,
            str(args.get("optimizer", "adamw-fused")), bool(args.get("gradient_checkpointing")),
            int(args.get("lora", 0)), prompt, int(args.get("generate", 0)), None,
            int(args.get("world", 1)), args.get("sharding"),
        )  # fmt: skip
        precisions = list(args.get("precision") or ["bf16-mixed"])
        bad = [p for p in precisions if p not in PRECISIONS]
        if bad:
            raise MemlensError(f"precision: {', '.join(bad)} is not one of {', '.join(PRECISIONS)}")
        rows = sweep(
            job, list(args.get("batch") or [1]), list(prompt or args.get("seq_len") or [1024]),
            precisions, list(args.get("gpu") or ["h100"]),
            lambda text: session.report(f"simulating {text}"),
        )  # fmt: skip
        return result(job, rows)

    doc = (
        "Will a Hugging Face causal LM fit? Peak active and reserved GPU memory of training "
        "or inference steps, where it goes (parameters, gradients, optimizer state, "
        "activations, workspaces, cache) and fits/short-by per card, from a config alone: "
        "no GPU, no weights, no user code. Answers `memlens estimate --json` "
        "(docs/estimate.md)."
    )
    return Tool("estimate", doc, schema, run)


SCRIPT_PROPERTIES: dict[str, Any] = {
    "script": _prop("string", "The training or inference script (.py) under the roots."),
    "args": {**_STRS, "description": "The script's own arguments."},
    "gpu": _prop("string", "The card (h100, a100, rtx4090, ..., like:SNAPSHOT)."),
    "device_memory": _prop("string", "The card's memory instead of gpu's, e.g. 24GiB."),
}
PLAN_PROPERTIES: dict[str, Any] = {
    **SCRIPT_PROPERTIES,
    "sweep": {**_STRS, "description": "'--ARG=V1,V2,...' per swept argument."},
    "find_max": _prop("string", "An integer argument (--batch-size) to find the largest fit of."),
    "lo": _prop("integer", "find_max's lower end (default 1)."),
    "hi": _prop("integer", "find_max's upper end (default 1024)."),
    "interpolate": _prop("boolean", "Sweep or find-max from a few simulations (exact sizes)."),
    "what_if": {**_STRS, "description": "Knobs to simulate (checkpoint=Block, autocast=bf16...)."},
}


def _script_argv(session: Session, args: dict[str, Any]) -> list[str]:
    """The script resolved under the roots (and this server's folder, where it runs, too),
    then its arguments; the card options first."""
    script = shlex.split(session.allowed_script(shlex.quote(str(args.get("script") or ""))))[0]
    words = [*_opt("--gpu", args.get("gpu")), *_opt("--device-memory", args.get("device_memory"))]
    extra = args.get("args") or []
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise MemlensError("args: a list of strings")
    return [*words, script, *extra]


def _opt(flag: str, value: Any) -> list[str]:
    return [] if value is None else [flag, str(value)]


def run_memlens(session: Session, argv: Sequence[str]) -> str:
    """`python -m memlens ARGV` in a child process: its stdout, its `memlens:` stderr lines
    handed to the session's reporter as they come; one error line when it fails. A stopped
    call kills the child."""
    child = subprocess.Popen(
        [sys.executable, "-m", "memlens", *argv], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, errors="replace",
    )  # fmt: skip
    last = ""
    try:
        assert child.stderr is not None and child.stdout is not None
        for line in child.stderr:
            line = line.strip().replace("\r", "")
            if line:
                last = line
                session.report(line.removeprefix("memlens: "))
        out = child.stdout.read()
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode not in (0, 1):  # 1: plan's "does not fit" is an answer
        raise MemlensError(last.removeprefix("memlens: error: ") or f"exit code {child.returncode}")
    return out


def simulate_tool() -> Tool:
    schema = _schema(dict(SCRIPT_PROPERTIES), ["script"])

    def run(session: Session, args: dict[str, Any]) -> Any:
        _check_names("simulate", args, schema)
        output = session.scratch_file("simulated.pickle")
        argv = _script_argv(session, args)
        run_memlens(session, ["simulate", "-o", str(output), *argv])
        opened = session.open(str(output))
        dev = opened.snapshot.device()
        return {
            "snapshot": opened.id,
            "path": str(output),
            "peak_active_bytes": dev.peak_active_bytes,
            "peak_reserved_bytes": dev.peak_reserved_bytes,
            "baseline_bytes": dev.baseline_bytes,
            "trace_entries": dev.n_events,
        }

    doc = (
        "Simulate a script on fake CUDA tensors and the caching allocator's model (no GPU): "
        "its snapshot is opened (pass the returned id to summary, peak, advise, ...). The "
        "script runs: offered only by a server started with --allow-run."
    )
    return Tool("simulate", doc, schema, run, read_only=False)


def plan_tool() -> Tool:
    schema = _schema(dict(PLAN_PROPERTIES), ["script"])

    def run(session: Session, args: dict[str, Any]) -> Any:
        _check_names("plan", args, schema)
        argv = ["plan", "--json", "-j", str(min(2, os.cpu_count() or 1))]
        for spec in args.get("sweep") or []:
            argv += ["--sweep", str(spec)]
        for knob in args.get("what_if") or []:
            argv += ["--what-if", str(knob)]
        if args.get("find_max") is not None:
            argv += ["--find-max", str(args["find_max"])]
            argv += [*_opt("--lo", args.get("lo")), *_opt("--hi", args.get("hi"))]
        if args.get("interpolate"):
            argv.append("--interpolate")
        try:
            return json.loads(run_memlens(session, [*argv, *_script_argv(session, args)]))
        except ValueError:
            raise MemlensError("plan printed no JSON") from None

    doc = (
        "Will it fit, and how far can it go: a script's peak memory over swept arguments, "
        "the largest value of one that fits a card (find_max), what-if knobs, by simulation "
        "(no GPU). Answers `memlens plan --json` (docs/plan.md). The script runs: offered "
        "only by a server started with --allow-run."
    )
    return Tool("plan", doc, schema, run, read_only=False)


def predict_tools(allow_run: bool) -> list[Tool]:
    """estimate always; simulate and plan only when the server may run scripts."""
    return [estimate_tool(), *([simulate_tool(), plan_tool()] if allow_run else [])]

"""`memlens estimate CONFIG.json --batch 8 --seq-len 1024 --gpu rtx4090`: will a Hugging
Face causal LM fit, without a script? The model is built from its config inside a
simulation (no weights, no download, no GPU); see docs/estimate.md."""

from __future__ import annotations

from typing import Any

import click

from memlens.cli.options import emit_json, status
from memlens.units import format_bytes

# What memlens estimate cannot model, said in --help and docs/estimate.md.
CANNOT = (
    "4-bit / 8-bit quantized base weights (QLoRA, bitsandbytes Linear4bit/8bit), DeepSpeed "
    "ZeRO, tensor or pipeline parallelism, CPU offload, generate()'s sampling and beam "
    "search (greedy decoding with the KV cache is modelled), and the CUDA context."
)
PRECISIONS = ("fp32", "bf16-mixed", "bf16", "fp16-mixed", "fp16")


def _ints(ctx: click.Context, param: click.Parameter, value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        out = [int(v) for v in value.split(",")]
    except ValueError:
        raise click.BadParameter(f"{value!r}: whole numbers separated by commas") from None
    if any(v < 1 for v in out):
        raise click.BadParameter(f"{value!r}: each must be 1 or more")
    return out


def _names(ctx: click.Context, param: click.Parameter, value: str) -> list[str]:
    out = [v.strip() for v in value.split(",") if v.strip()]
    if param.name == "precision":
        bad = [p for p in out if p not in PRECISIONS]
        if bad:
            raise click.BadParameter(f"{', '.join(bad)}: one of {', '.join(PRECISIONS)}")
    return out


@click.command("estimate", epilog=f"Not modelled: {CANNOT}")
@click.argument("config", required=False, metavar="[CONFIG.json|DIR]")
@click.option("--model-type", help="Instead of CONFIG: a transformers model type (llama, ...).")
@click.option("--hidden-size", type=int)
@click.option("--layers", type=int, help="num_hidden_layers.")
@click.option("--heads", type=int, help="num_attention_heads.")
@click.option("--kv-heads", type=int, help="num_key_value_heads.")
@click.option("--intermediate-size", type=int)
@click.option("--vocab-size", type=int)
@click.option("--tie-embeddings/--untie-embeddings", default=None)
@click.option("--task", type=click.Choice(["train", "inference"]), default="train",
              show_default=True, help="Causal-LM training steps, or inference.")  # fmt: skip
@click.option("--batch", default="1", callback=_ints, show_default=True,
              help="Batch size per GPU; several, comma-separated, make table rows.")  # fmt: skip
@click.option("--seq-len", default="1024", callback=_ints, show_default=True,
              help="Tokens per sequence (comma-separated for several).")  # fmt: skip
@click.option("--precision", default="bf16-mixed", callback=_names, show_default=True,
              help="fp32, bf16-mixed, bf16, fp16-mixed, fp16 (comma-separated for several).")  # fmt: skip
@click.option("--optimizer", default="adamw-fused", show_default=True,
              help="adamw, adamw-fused, adamw-foreach, adamw-loop, sgd, sgd-momentum, "
              "adafactor, adamw-8bit (bitsandbytes).")  # fmt: skip
@click.option("--gradient-checkpointing", is_flag=True,
              help="model.gradient_checkpointing_enable().")  # fmt: skip
@click.option("--lora", type=int, default=0, metavar="R",
              help="LoRA of rank R through peft (its default target modules).")  # fmt: skip
@click.option("--prompt", callback=_ints, default=None,
              help="Inference: prompt tokens, decoded with the KV cache (with --generate).")  # fmt: skip
@click.option("--generate", type=int, default=0, help="Inference: new tokens to decode.")
@click.option("--steps", type=int, default=None,
              help="Steps simulated (default 2 in training, 1 in inference).")  # fmt: skip
@click.option("--world", type=int, default=1, show_default=True, help="GPUs (rank 0 is shown).")
@click.option("--sharding", type=click.Choice(["fsdp2", "ddp"]), default=None,
              help="With --world N: FSDP2 fully_shard per block, or DDP.")  # fmt: skip
@click.option("--gpu", default="h100", callback=_names, show_default=True,
              help="Cards to simulate and fit (comma-separated for several).")  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON.")
def command(
    config: str | None,
    model_type: str | None,
    task: str,
    batch: list[int],
    seq_len: list[int],
    precision: list[str],
    optimizer: str,
    gradient_checkpointing: bool,
    lora: int,
    prompt: list[int] | None,
    generate: int,
    steps: int | None,
    world: int,
    sharding: str | None,
    gpu: list[str],
    as_json: bool,
    **sizes: Any,
) -> None:
    """Estimate a Hugging Face causal LM's GPU memory from its config: peak active and
    reserved, where it goes, and whether it fits each --gpu card, without a GPU or a
    script. Each configuration (batch x sequence x precision) is simulated on fake CUDA
    tensors, with the model built by AutoModelForCausalLM.from_config."""
    from memlens.simulation.estimate_sweep import make_task, result, sweep

    train = task == "train"
    job = make_task(config, model_type, sizes, train, optimizer, gradient_checkpointing, lora,
                    prompt, generate, steps, world, sharding)  # fmt: skip
    say = None if as_json else (lambda text: status(f"memlens: simulating {text}", err=True))
    rows = sweep(job, batch, prompt or seq_len, precision, gpu, say)
    answer = result(job, rows)
    if as_json:
        emit_json(answer)
        return
    click.echo(
        f"{answer['model_type']}, {answer['parameters']:,} parameters, {answer['task']}"
        + (f" with {optimizer}" if train else "")
    )
    _print(rows)


def _print(rows: list[Any]) -> None:
    if rows[0]["wrapped"]:
        click.echo(rows[0]["wrapped"])
    head = ("batch", "tokens", "precision", "gpu", "peak active", "peak reserved", "fits")
    table = [head]
    for r in rows:
        fit = r["fit"]
        side = "headroom" if fit["margin_bytes"] >= 0 else "short by"
        tokens = f"{r['tokens']}+{r['generate']}" if r["generate"] else str(r["tokens"])
        verdict = "yes" if fit["fits"] else "NO"
        table.append(
            (
                str(r["batch"]), tokens, r["precision"], r["gpu"],
                format_bytes(r["peak_active_bytes"]), format_bytes(r["peak_reserved_bytes"]),
                f"{verdict}: {side} {format_bytes(abs(fit['margin_bytes']))}",
            )
        )  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    first = rows[0]["breakdown"]
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in first.items() if v)
    click.echo(f"at the active peak of the first row: {parts}")
    for note in dict.fromkeys(n for r in rows for n in r["notes"]):
        click.echo(f"note: {note}")
    click.echo(
        "capacity: the card's total as nvidia-smi reports it (the CUDA context takes a few "
        "hundred MiB of it); fits = the run completes when limited to it"
    )

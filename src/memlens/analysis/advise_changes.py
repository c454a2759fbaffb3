"""The change each `memlens advise` finding asks for, as text to paste: the allocator setting,
the code that checkpoints a named class, SDPA in place of a hand-written attention, FSDP2's
sharding and mixed precision. Plain PyTorch always; the Hugging Face and Lightning spellings
where the trace runs under those trainers (their frames are in the stacks)."""

from __future__ import annotations

from memlens.analysis.matching import rows_matching, stack_matches
from memlens.snapshot.model import DeviceTrace

HF = r"transformers[/\\]"
LIGHTNING = r"(?:pytorch_)?lightning[/\\]"


def frameworks(dev: DeviceTrace) -> set[str]:
    """ "hf" and/or "lightning" when an allocation's stack runs through their code."""
    found = set()
    for name, pattern in (("hf", HF), ("lightning", LIGHTNING)):
        if rows_matching(stack_matches(dev.snapshot, pattern), dev.alloc_stack).any():
            found.add(name)
    return found


def allocator_change(settings: str) -> str:
    return (
        f"export PYTORCH_CUDA_ALLOC_CONF={settings}\n"
        "# in the shell that starts training; or in the script, before its first CUDA tensor:\n"
        f'# torch.cuda.memory._set_allocator_settings("{settings}")'
    )


def checkpoint_change(cls: str | None, where: set[str]) -> str:
    name = cls or "Block"
    lines = [] if cls else [
        "# the class is not named: pass --source-root DIR (your code) to read it from the "
        "source, or put your repeated block's class in place of Block"
    ]  # fmt: skip
    lines += [
        f"# checkpoint every {name}: its forward runs again in backward, only its input kept",
        "from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (",
        "    apply_activation_checkpointing)",
        f"apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, {name}))",
    ]
    if "hf" in where:
        lines.append(
            "# Hugging Face: model.gradient_checkpointing_enable("
            'gradient_checkpointing_kwargs={"use_reentrant": False}), or '
            "TrainingArguments(gradient_checkpointing=True)"
        )
    if "lightning" in where:
        lines.append(
            f"# Lightning: FSDPStrategy(activation_checkpointing_policy={{{name}}}), or "
            "apply_activation_checkpointing in LightningModule.configure_model"
        )
    return "\n".join(lines)


def attention_change(site: str) -> str:
    return (
        f"# at {site}: in place of softmax(q @ k.transpose(-2, -1) * scale [+ mask]) @ v\n"
        "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
        "# (attn_mask=mask instead of is_causal for another mask; dropout_p for dropout)"
    )


def sharding_change(ranks: int, cls: str | None) -> str:
    block = cls or "Block"
    return (
        "from torch.distributed.fsdp import fully_shard\n"
        f"for m in model.modules():\n    if isinstance(m, {block}):\n        fully_shard(m)\n"
        f"fully_shard(model)   # then: torchrun --nproc-per-node {ranks} train.py"
    )


def leak_change(site: str) -> str:
    return (
        f"# at {site}: keep what outlives a step small: loss.item() or tensor.detach() "
        "instead of the tensor, and clear lists or dicts that collect tensors each step"
    )


def autocast_change() -> str:
    return (
        'with torch.autocast("cuda", dtype=torch.bfloat16):   # float16 on cards without bf16\n'
        "    loss = loss_fn(model(inputs), targets)\n"
        "loss.backward()   # backward and optimizer.step() outside the autocast region"
    )


def weight_casts_change(kept_for_backward: bool | None) -> str:
    if kept_for_backward:
        return (
            "# keep the parameters in bf16: under FSDP2, its mixed precision (fp32 reduce)\n"
            "from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard\n"
            "fully_shard(model, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, "
            "reduce_dtype=torch.float32))\n"
            "# without FSDP: model.to(torch.bfloat16) with an optimizer that keeps fp32 state"
        )
    return 'with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):'

"""`memlens estimate`'s Hugging Face side: a causal LM from its config (a local
`config.json`, or a model type and its sizes), built with
`AutoModelForCausalLM.from_config` inside the simulation (no weights, no download), its
options (gradient checkpointing, LoRA through peft) and its optimizers by name.

transformers (and peft for LoRA, bitsandbytes for 8-bit AdamW) are imported when used.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memlens.errors import MemlensError

# --model-type's sizes: option name -> the config field (the names most configs share)
SIZE_FIELDS: dict[str, str] = {
    "hidden_size": "hidden_size",
    "layers": "num_hidden_layers",
    "heads": "num_attention_heads",
    "kv_heads": "num_key_value_heads",
    "intermediate_size": "intermediate_size",
    "vocab_size": "vocab_size",
    "tie_embeddings": "tie_word_embeddings",
}

# --optimizer NAME -> (what it is, for the help and docs)
OPTIMIZERS: dict[str, str] = {
    "adamw": "torch.optim.AdamW, torch's default implementation (foreach on CUDA)",
    "adamw-fused": "torch.optim.AdamW(fused=True) (the Trainer's default, adamw_torch_fused)",
    "adamw-foreach": "torch.optim.AdamW(foreach=True)",
    "adamw-loop": "torch.optim.AdamW(foreach=False): one parameter at a time",
    "sgd": "torch.optim.SGD without momentum (no state)",
    "sgd-momentum": "torch.optim.SGD(momentum=0.9): one buffer per parameter",
    "adafactor": "torch.optim.Adafactor (factored second moments)",
    "adamw-8bit": "bitsandbytes.optim.AdamW8bit (its ops' fake kernels; needs bitsandbytes)",
}


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise MemlensError(
            "memlens estimate needs transformers: pip install 'memlens[hf]'"
        ) from None
    return transformers


def load_config(path: str | None, model_type: str | None, sizes: Mapping[str, Any]) -> Any:
    """The model's PretrainedConfig: `path` (a config.json, or a folder holding one) with
    `sizes` replacing its fields, or `model_type` with `sizes` over its defaults."""
    transformers = _transformers()
    fields = {SIZE_FIELDS[k]: v for k, v in sizes.items() if v is not None}
    if (path is None) == (model_type is None):
        raise MemlensError("give a config.json path or --model-type (one of the two)")
    if path is not None:
        file = Path(path) / "config.json" if Path(path).is_dir() else Path(path)
        try:
            given = json.loads(file.read_text())
        except OSError as exc:
            raise MemlensError(f"cannot read {file}: {exc.strerror}") from None
        except ValueError as exc:
            raise MemlensError(f"{file} is not JSON: {exc}") from None
        if not isinstance(given, dict) or "model_type" not in given:
            raise MemlensError(f"{file} has no model_type: not a Hugging Face config.json")
        model_type = str(given.pop("model_type"))
        fields = {**given, **fields}
    assert model_type is not None
    try:
        return transformers.AutoConfig.for_model(model_type, **fields)
    except (ValueError, KeyError) as exc:
        raise MemlensError(f"model type {model_type!r}: {exc}") from None


@dataclass(frozen=True)
class Build:
    """How the model is built inside the simulation: a function of no arguments."""

    config: Any
    gradient_checkpointing: bool = False
    lora: int = 0  # rank; 0: no LoRA

    def __call__(self) -> Any:
        transformers = _transformers()
        model = transformers.AutoModelForCausalLM.from_config(self.config)
        if self.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if self.lora:
            model = _with_lora(model, self.lora)
            if self.gradient_checkpointing:
                # what peft asks for with checkpointing: the frozen embeddings' output
                # must require grad for the checkpointed blocks to get gradients
                model.enable_input_require_grads()
        return model

    def check(self) -> None:
        """Fail before any simulation when an option's package is missing."""
        if self.lora:
            _peft()


def _peft() -> Any:
    try:
        import peft
    except ImportError:
        raise MemlensError(
            "--lora needs peft (pip install peft); without it LoRA cannot be modelled"
        ) from None
    return peft


def _with_lora(model: Any, rank: int) -> Any:
    """peft's LoRA on the modules peft targets by default for this model type."""
    peft = _peft()
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, task_type="CAUSAL_LM")
    return peft.get_peft_model(model, config)


def optimizer(name: str) -> Callable[[list[Any]], Any]:
    """The optimizer factory for an --optimizer name (learning rates do not change memory)."""
    import torch

    if name not in OPTIMIZERS:
        raise MemlensError(f"--optimizer {name!r}: one of {', '.join(OPTIMIZERS)}")
    if name == "adamw-8bit":
        import importlib

        try:
            # by name: an optional package without type stubs
            bnb = importlib.import_module("bitsandbytes")
        except ImportError:
            raise MemlensError(
                "--optimizer adamw-8bit needs bitsandbytes (pip install bitsandbytes); "
                "without it 8-bit AdamW cannot be modelled"
            ) from None
        eight_bit: Callable[[list[Any]], Any] = bnb.optim.AdamW8bit
        return eight_bit
    table: dict[str, Callable[[list[Any]], Any]] = {
        "adamw": lambda ps: torch.optim.AdamW(ps),
        "adamw-fused": lambda ps: torch.optim.AdamW(ps, fused=True),
        "adamw-foreach": lambda ps: torch.optim.AdamW(ps, foreach=True),
        "adamw-loop": lambda ps: torch.optim.AdamW(ps, foreach=False),
        "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-3),
        "sgd-momentum": lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9),
        "adafactor": lambda ps: torch.optim.Adafactor(ps),
    }
    return table[name]


def causal_lm_inputs(batch: int, tokens: int, labels: bool) -> dict[str, Any]:
    """Token ids (zeros: values do not change memory) on the CPU, with labels to train."""
    import torch

    ids = torch.zeros(batch, tokens, dtype=torch.long)
    return {"input_ids": ids, "labels": ids} if labels else {"input_ids": ids}

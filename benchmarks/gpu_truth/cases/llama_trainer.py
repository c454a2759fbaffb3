"""A small Llama-style model built from a config (no weights, no hub), fine-tuned one step
with the Hugging Face `Trainer`, SDPA attention and bf16, recorded by `MemlensCallback`.

    python llama_trainer.py --out DIR                 # DIR/memlens/steps1-1_rank0.pickle
    python llama_trainer.py --out DIR --compile       # the same under torch.compile

Runs unchanged on a GPU, under `memlens simulate` (where torch.compile runs eagerly) and,
for run.sh's MEMLENS_GPU_TRUTH_FAKE=1, on the CPU with the fake capture backend.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainingArguments,
)

from memlens.integrations.hf import MemlensCallback  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=32_000)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--compile", action="store_true", help="TrainingArguments(torch_compile=True)")
    p.add_argument("--compile-backend", default="inductor")
    return p.parse_args()


class Tokens(torch.utils.data.Dataset):  # type: ignore[type-arg]
    def __init__(self, vocab: int, seq: int) -> None:
        self.vocab, self.seq = vocab, seq

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, self.vocab, (self.seq,))
        return {"input_ids": ids, "labels": ids}


def main() -> None:
    a = parse()
    config = LlamaConfig(
        vocab_size=a.vocab,
        hidden_size=a.hidden,
        intermediate_size=a.intermediate,
        num_hidden_layers=a.layers,
        num_attention_heads=a.heads,
        num_key_value_heads=a.kv_heads,
        max_position_embeddings=max(2048, a.seq),
    )
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)
    args = TrainingArguments(
        output_dir=str(a.out / "trainer"),
        per_device_train_batch_size=a.batch_size,
        max_steps=1,
        bf16=True,
        report_to="none",
        save_strategy="no",
        logging_strategy="no",
        dataloader_num_workers=0,
        # without CUDA (run.sh's fake run) the Trainer refuses bf16 unless told it is a CPU run
        use_cpu=not torch.cuda.is_available(),
        torch_compile=a.compile,
        torch_compile_backend=a.compile_backend if a.compile else None,
    )
    callback = MemlensCallback(record_steps=(1, 1), output_dir=a.out)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=Tokens(a.vocab, a.seq),
        callbacks=[callback],
    )
    trainer.train()
    print(f"memlens window: {callback.snapshot_path}")


if __name__ == "__main__":
    main()

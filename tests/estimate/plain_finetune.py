"""The Trainer-free fine-tune `memlens.estimate` stands for, written as a user would: a
Hugging Face causal LM built from its config, moved to the GPU, fused AdamW, bf16
autocast, two steps. `tests/estimate/test_estimate.py` simulates it with `memlens
simulate` and compares its peak with `memlens.estimate` and `memlens estimate`.

    python plain_finetune.py CONFIG.json --batch 2 --seq 16 [--precision bf16-mixed]
"""

import argparse
import json

import torch
from transformers import AutoConfig, AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("config")
p.add_argument("--batch", type=int, default=2)
p.add_argument("--seq", type=int, default=16)
p.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="bf16-mixed")
p.add_argument("--checkpointing", action="store_true")
a = p.parse_args()

with open(a.config) as f:
    fields = json.load(f)
config = AutoConfig.for_model(fields.pop("model_type"), **fields)
model = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
if a.checkpointing:
    model.gradient_checkpointing_enable()
model = model.to("cuda")
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], fused=True)
ids = torch.zeros(a.batch, a.seq, dtype=torch.long)
for _step in range(2):
    batch = {"input_ids": ids.to("cuda"), "labels": ids.to("cuda")}
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16-mixed"):
        loss = model(**batch).loss  # the output (logits) dies here, as in the Trainer
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

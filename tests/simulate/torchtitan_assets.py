"""The small test assets torchtitan's llama3 debug model reads, made here (no download).

torchtitan's `llama3_debugmodel` config reads `./tests/assets/tokenizer` (a Hugging Face
`tokenizer.json` with `tokenizer_config.json`) and the `c4_test` dataset at
`./tests/assets/c4_test`, both relative to the working directory; its wheel ships
neither (its source repository has them). This writes a byte-level BPE tokenizer of
2,000 tokens (the model's vocabulary is 2,048) trained on made-up text, and 200 lines of
that text as the dataset, under ROOT:

    python tests/simulate/torchtitan_assets.py ROOT

then run torchtitan from ROOT. Memory does not depend on the text: only the token ids'
count (batch x sequence length) does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 2000  # under the debug model's 2,048
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def lines() -> list[str]:
    """200 lines of 64 made-up words each (deterministic)."""
    words = [f"w{i}" for i in range(3000)]
    return [" ".join(words[(i * 7 + j * 13) % 3000] for j in range(64)) for i in range(200)]


def write(root: Path) -> Path:
    """Write tests/assets/{tokenizer,c4_test} under root; return root."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    text = lines()
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(text, trainer)
    tok_dir = root / "tests" / "assets" / "tokenizer"
    tok_dir.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(tok_dir / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": True}
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(config))
    data_dir = root / "tests" / "assets" / "c4_test"
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "data.json").write_text("".join(json.dumps({"text": t}) + "\n" for t in text))
    return root


if __name__ == "__main__":
    write(Path(sys.argv[1]))

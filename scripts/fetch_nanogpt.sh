#!/usr/bin/env bash
# A checkout of nanoGPT (github.com/karpathy/nanoGPT, MIT) at the commit the opt-in test
# tests/simulate/test_simulate_nanogpt.py was written against, for
#   MEMLENS_NANOGPT_DIR=DIR python -m pytest tests/simulate/test_simulate_nanogpt.py
# Needs network access to GitHub; nanoGPT's code stays out of this repository.
set -euo pipefail
dir="${1:-nanoGPT}"
commit=3adf61e154c3fe3fca428ad6bc3818b27a3b8291
if [ ! -d "$dir/.git" ]; then
  git clone --quiet https://github.com/karpathy/nanoGPT "$dir"
fi
git -C "$dir" checkout --quiet "$commit"
echo "MEMLENS_NANOGPT_DIR=$(cd "$dir" && pwd)"

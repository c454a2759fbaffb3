#!/usr/bin/env bash
# Install torchtitan 0.3.0 and what `import torchtitan.train` needs into one directory
# (default .tools/sim-trainers, git-ignored), beside the environment rather than in it, for
# tests/simulate/test_simulate_torchtitan.py and docs/simulation.md's torchtitan runs:
#
#   bash scripts/setup_sim_trainers.sh [DIR]
#   MEMLENS_SIM_TRAINERS_PATH=$PWD/.tools/sim-trainers python3 -m pytest tests/simulate/test_simulate_torchtitan.py
#
# Not part of scripts/setup.sh (so not of CI): it is about 350 MB to download and 1.2 GB
# installed (triton alone, which torchtitan imports at start-up and torch's CPU build does
# not bring, is 286 MB and 1 GB), and its test simulates about 10 minutes on a 2-core machine.
# --no-deps with every package pinned: pip must not replace the installed torch (torchtitan
# 0.3.0 targets torch 2.15), nor move the environment's huggingface_hub or fsspec
# (datasets wants older ones; these copies shadow them only where DIR is on the path).
# Packages the environment already has (tokenizers, safetensors, einops, pillow, numpy,
# pyarrow, requests, rich, PyYAML...) are used from it.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-.tools/sim-trainers}"
PACKAGES=(
  torchtitan==0.3.0
  # torchtitan's own requirements that `import torchtitan.train` and the llama3 debug
  # model reach (wandb is imported only when its logging is on)
  tyro==1.0.17 docstring_parser==0.18.0 typeguard==4.6.1
  torchdata==0.11.0 torch_checkpointing==0.1.1 spmd_types==0.2.3
  tensorboard==2.21.0 tensorboard-data-server==0.7.2 absl-py==2.5.1 markdown==3.11.3
  protobuf==7.36.2 grpcio==1.85.3
  datasets==4.7.0 dill==0.4.0 pandas==3.1.1 multiprocess==0.70.18 xxhash==4.1.0
  huggingface_hub==1.33.0 fsspec==2026.2.0
  # the version torch 2.14.1's CUDA build requires
  triton==3.8.0
  # float8 (torchtitan's *_float8 configs: Float8Linear): simulated on torch 2.14.1, imports
  # on 2.13 (its compiled kernels fail to load there; Float8Linear needs none of them)
  torchao==0.18.0
)
python3 -m pip install -q --disable-pip-version-check --no-deps --target "$DIR" "${PACKAGES[@]}"
echo "memlens setup: torchtitan and its needs are in $DIR: MEMLENS_SIM_TRAINERS_PATH=$(cd "$DIR" && pwd)"

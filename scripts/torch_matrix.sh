#!/usr/bin/env bash
# Opt-in: run the simulation's tests (tests/simulate) under another torch release, in a
# virtual environment of its own, beside the pinned CPU torch the suite normally uses.
# The simulation leans on torch internals (FakeTensorMode, Dynamo, AOTAutograd, the
# Inductor lowering rules, torch.cuda's Python), which change between releases.
#
#   scripts/torch_matrix.sh 2.14.1                 # every test of tests/simulate
#   scripts/torch_matrix.sh 2.14.1 -x tests/simulate/test_simulate_cuda_graphs.py
#   scripts/torch_matrix.sh 2.15.0 tests/simulate -n 2   # pytest-xdist: two workers
#
# The venv is $MEMLENS_TORCH_VENV, else .venvs/torch-VERSION (git-ignored); it is made
# once and reused. pip takes torch==VERSION as configured (a CUDA build from the index
# brings GBs of CUDA libraries; the simulation needs none of them, but runs on either).
# memlens itself runs from src/ (PYTHONPATH), with its compiled readers where they were
# built for the same Python.
set -euo pipefail
cd "$(dirname "$0")/.."

version="${1:?usage: scripts/torch_matrix.sh VERSION [PYTEST_ARGS...]}"
shift
venv="${MEMLENS_TORCH_VENV:-.venvs/torch-$version}"

if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$version')" 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "torch==$version" numpy
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check -c constraints-dev.txt \
  pytest pytest-xdist hypothesis pyyaml "click>=8.1" "rich>=13"

echo "torch_matrix: $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)') in $venv"
args=("$@")
[ "${#args[@]}" -gt 0 ] || args=(tests/simulate)
PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "${args[@]}"

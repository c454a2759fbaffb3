#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite, as CI does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The full suite includes the slow simulation of a real training script against its GPU
# recording (~35 s CPU); a bare `pytest` in one area skips it.
export MEMLENS_SLOW_SIMULATIONS="${MEMLENS_SLOW_SIMULATIONS:-1}"
# Every snapshot a test reads is built twice, on the compiled reader and replay and on the
# Python reader and numpy replay, and the two compared to the byte (a difference fails the
# test: memlens.snapshot.reader_agreement). MEMLENS_READER=auto runs the default path only.
export MEMLENS_READER="${MEMLENS_READER:-both}"
# --durations=25: the slowest tests, printed after the summary, so a slow one is seen
exec python3 -m pytest -n 2 --dist loadfile -q --durations=25 "$@"

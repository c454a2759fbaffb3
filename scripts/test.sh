#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite, as CI does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec python3 -m pytest -n 2 --dist loadfile -q "$@"

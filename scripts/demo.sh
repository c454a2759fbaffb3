#!/usr/bin/env bash
# Set up, then run memlens's main job on a default example: generate a realistic
# training-loop snapshot (real ones cannot ship), summarize it, and write the HTML report.
set -euo pipefail
cd "$(dirname "$0")/.."
MEMLENS_SKIP_APT=1 bash scripts/setup.sh
mkdir -p examples/out
memlens generate examples/out/example.pickle --events 200000 --layers 12
memlens summary examples/out/example.pickle
memlens report examples/out/example.pickle -o examples/out/example.html
echo
echo "report: examples/out/example.html   browse it live: memlens view examples/out/example.pickle"

#!/usr/bin/env bash
# modded-nanogpt's 2024-12-10 record (github.com/KellerJordan/modded-nanogpt, MIT), for
#   MEMLENS_MODDED_NANOGPT_DIR=DIR python -m pytest tests/simulate/test_simulate_modded_nanogpt.py
# The record's log holds the exact script it ran (everything above its first line of
# '=' characters) and, at its end, the run's own `torch.cuda.max_memory_allocated()` on
# rank 0 of 8 H100s. DIR gets train_gpt.py (the script as the log holds it) and record.txt
# (the whole log). Needs network access to GitHub; the code stays out of this repository.
set -euo pipefail
dir="${1:-modded-nanogpt-record}"
commit=f411b3d346aa52d3504324ca93c230fd84c6c07f
record=records/track_1_short/2024-12-10_MFUTweaks/04df8c70-2462-4b6c-9e49-c7589b321a81.txt
mkdir -p "$dir"
if [ ! -d "$dir/repo/.git" ]; then
  git clone --quiet https://github.com/KellerJordan/modded-nanogpt "$dir/repo"
fi
git -C "$dir/repo" show "$commit:$record" > "$dir/record.txt"
# the log starts with the script's source, then a line of 100 '='
awk 'length($0) == 100 && $0 !~ /[^=]/ { exit } { print }' "$dir/record.txt" > "$dir/train_gpt.py"
echo "MEMLENS_MODDED_NANOGPT_DIR=$(cd "$dir" && pwd)"

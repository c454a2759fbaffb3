#!/usr/bin/env bash
# Three of modded-nanogpt's records (github.com/KellerJordan/modded-nanogpt, MIT), for
#   MEMLENS_MODDED_NANOGPT_DIR=DIR python -m pytest tests/simulate/test_simulate_modded_nanogpt.py
# Each record's log holds the exact script it ran (everything above its first line of '='
# characters) and, at its end, the run's own peak on rank 0 of 8 H100s. DIR gets, for
# 2024-12-10, train_gpt.py (the script as the log holds it) and record.txt (the whole log),
# and the same for 2024-12-17 and 2025-01-04 in DIR/2024-12-17_SparsifyEmbeds and
# DIR/2025-01-04_SoftCap. Needs network access to GitHub; the code stays out of this
# repository.
set -euo pipefail
dir="${1:-modded-nanogpt-record}"
commit=f411b3d346aa52d3504324ca93c230fd84c6c07f
records=records/track_1_short
mkdir -p "$dir/2024-12-17_SparsifyEmbeds" "$dir/2025-01-04_SoftCap"
if [ ! -d "$dir/repo/.git" ]; then
  git clone --quiet https://github.com/KellerJordan/modded-nanogpt "$dir/repo"
fi
extract() {  # extract RECORD_LOG OUT_DIR
  git -C "$dir/repo" show "$commit:$records/$1" > "$2/record.txt"
  # the log starts with the script's source, then a line of 100 '='
  awk 'length($0) == 100 && $0 !~ /[^=]/ { exit } { print }' "$2/record.txt" > "$2/train_gpt.py"
}
extract 2024-12-10_MFUTweaks/04df8c70-2462-4b6c-9e49-c7589b321a81.txt "$dir"
extract 2024-12-17_SparsifyEmbeds/165384d5-5a41-4fba-9b79-8ecc372616ea.txt \
  "$dir/2024-12-17_SparsifyEmbeds"
extract 2025-01-04_SoftCap/31d6c427-f1f7-4d8a-91be-a67b5dcd13fd.txt "$dir/2025-01-04_SoftCap"
echo "MEMLENS_MODDED_NANOGPT_DIR=$(cd "$dir" && pwd)"

#!/usr/bin/env bash
# Run HERE (a machine with pip and a network), before the device run: fills .whl/ at the
# repository's root with the wheels the GPU machine lacks, for its Python 3.12 on x86-64.
#
#   bash benchmarks/gpu_truth/prepare.sh
#
# The GPU machine already has torch 2.11, transformers, lightning, einops, jaxtyping,
# numpy, sympy, click and rich. Missing: einx (cs336_basics imports it) and einx's
# frozendict. memlens itself travels as this source tree (run.sh puts src/ on PYTHONPATH
# and builds its compiled reader there, falling back to the Python reader): a wheel built
# here would carry a compiled module for this machine's Python, not the GPU machine's.
set -eu
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WHL="$ROOT/.whl"
# pinned: one version of each (two of one name stop pip's install there)
PACKAGES=(einx==0.4.3 frozendict==2.5.1)
mkdir -p "$WHL"
rm -f "$WHL"/einx-*.whl "$WHL"/frozendict-*.whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$WHL" "${PACKAGES[@]}"
# .whl/ travels only when named in `carry`: keep it out of git (and of the plain tree copy)
if ! git -C "$ROOT" check-ignore -q "$WHL/x.whl"; then
    exclude=$(git -C "$ROOT" rev-parse --git-path info/exclude)
    case $exclude in /*) ;; *) exclude="$ROOT/$exclude" ;; esac
    mkdir -p "$(dirname "$exclude")"
    echo "/.whl/" >>"$exclude"
fi
ls -l "$WHL"
du -sh "$WHL"

#!/usr/bin/env bash
# GPU ground truth for memlens: record real snapshots with memlens's capture API, simulate
# the same scripts, write gpu_truth.json + run.log + recordings-N.tar into OUTDIR.
#
#   bash benchmarks/gpu_truth/run.sh [OUTDIR]          # default: $OUT (the device tool's)
#   MEMLENS_GPU_TRUTH_FAKE=1 bash benchmarks/gpu_truth/run.sh /tmp/x   # no GPU: dry run
#
# See benchmarks/gpu_truth/README.md (the device tool's exact invocation is there).
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OUTDIR=${1:-${OUT:-}}
if [ -z "$OUTDIR" ]; then
    echo "usage: bash benchmarks/gpu_truth/run.sh OUTDIR   (or set OUT)" >&2
    exit 2
fi
mkdir -p "$OUTDIR" || exit 2
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# memlens runs from this source tree (the project itself travels to the GPU machine)
export PYTHONPATH="$ROOT/src${PYTHONPATH:+:$PYTHONPATH}"

if [ "${MEMLENS_GPU_TRUTH_FAKE:-0}" != 1 ]; then
    # What the GPU machine lacks travels as wheels in .whl/ (prepare.sh, run here).
    if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
        SITE=${MEMLENS_GPU_TRUTH_SITE:-/tmp/memlens-gpu-truth-site}
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "$ROOT"/.whl/*.whl || echo "gpu_truth: wheels not installed" >&2
        export PYTHONPATH="$PYTHONPATH:$SITE"
    fi
    # memlens's compiled reader for this Python, built in place; without a compiler or
    # zlib's header memlens reads with its Python path (slower, same results).
    (cd "$ROOT" && timeout 60 "$PY" setup.py build_ext --inplace -q >/dev/null 2>&1) \
        || echo "gpu_truth: compiled reader not built; memlens reads with its Python path" >&2
fi
exec "$PY" "$HERE/truth.py" "$OUTDIR"

#!/usr/bin/env bash
# The compiled reader and replay under AddressSanitizer + UndefinedBehaviorSanitizer: both
# extensions are built with -fsanitize=address,undefined into a scratch copy of the
# package, then the snapshot tests (the compiled reader's fuzz corpus among them:
# tests/snapshot/test_compiled_fuzz.py) and the scan's differential fuzz
# (tests/hostile/test_prescan.py) run against it. Any report fails the run. Needs gcc or
# clang with the sanitizer runtimes (Debian/Ubuntu: gcc is enough).
#
#   scripts/sanitize.sh              # the default run (CI)
#   scripts/sanitize.sh tests/x.py   # other tests under the same build
set -euo pipefail
cd "$(dirname "$0")/.."
CC="${CC:-gcc}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -O1 -g"
echo "== build ($CC $flags)"
CC="$CC" CFLAGS="$flags" LDFLAGS="-fsanitize=address,undefined" \
    python3 setup.py -q build_ext --build-lib "$work/lib" --build-temp "$work/tmp" >/dev/null
mkdir -p "$work/src"
cp -r src/memlens "$work/src/memlens"
find "$work/src/memlens" -name '_fast*.so' -delete
cp "$work"/lib/memlens/snapshot/_fast*.so "$work/src/memlens/snapshot/"
for m in _fastreader _fastreplay; do
    [ -e "$work/src/memlens/snapshot/$m".*.so ] || { echo "$m did not build"; exit 1; }
done

# Python itself is not instrumented: the ASan runtime must be loaded first. Leaks are not
# checked (the interpreter keeps objects to its exit on purpose).
asan="$("$CC" -print-file-name=libasan.so)"
export LD_PRELOAD="$asan"
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$work/src"
export CI="${CI:-true}"  # a module that did not build fails, not falls back
python3 -c "import memlens.snapshot._fastreader as r, memlens.snapshot._fastreplay as p; \
assert r.__file__.startswith('$work') and p.__file__.startswith('$work'), (r, p)"
echo "== tests under ASan+UBSan"
if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=(tests/snapshot tests/hostile/test_prescan.py tests/hostile/test_hash_flood.py)
fi
python3 -m pytest -q -p no:cacheprovider -x "${targets[@]}"

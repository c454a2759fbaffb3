#!/usr/bin/env bash
# The maintainer checks CI runs besides the tests: lint, formatting, types and the wheel's
# contents. Run after scripts/setup.sh (scripts/test.sh does it) so the dev tools are there.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== ruff check";          python3 -m ruff check .
echo "== ruff format --check"; python3 -m ruff format --check .
echo "== mypy";                python3 -m mypy
if command -v clang-format >/dev/null; then
    echo "== clang-format"; clang-format --dry-run -Werror src/memlens/snapshot/*.c
else
    echo "== clang-format: not installed (pip install clang-format), skipped"
fi
# ASan+UBSan over the compiled reader and replay (about 3 minutes; issue 24/27)
if [ "${MEMLENS_SKIP_SANITIZE:-}" != "1" ]; then
    echo "== sanitizers"; bash scripts/sanitize.sh
fi
echo "== wheel"
dist="$(mktemp -d)"
trap 'rm -rf "$dist"' EXIT
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$dist" . >/dev/null
python3 scripts/check_wheel.py "$dist"/memlens-*.whl

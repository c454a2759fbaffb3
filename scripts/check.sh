#!/usr/bin/env bash
# The maintainer checks CI runs besides the tests: lint, formatting, types and the wheel's
# contents. Run after scripts/setup.sh (scripts/test.sh does it) so the dev tools are there.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== ruff check";          python3 -m ruff check .
echo "== ruff format --check"; python3 -m ruff format --check .
echo "== mypy";                python3 -m mypy
echo "== mypy tests";          bash scripts/mypy_tests.sh
echo "== dead code";           python3 scripts/deadcode.py
# the viewer's ES modules against the API's answers (static/js/types.js); no bundler, no
# output: tsc only reads them (scripts/setup.sh puts it in .tools/)
echo "== tsc --checkJs"
(cd src/memlens/views/web/static/js && ../../../../../../.tools/node_modules/.bin/tsc \
  --noEmit --allowJs --checkJs --target es2022 --module es2022 --moduleResolution bundler \
  --lib es2022,dom,dom.iterable ./*.js pane/*.js)
# every JS file we ship or test, in prettier's style (.prettierrc.json); `prettier --write`
# with the same paths fixes them
echo "== prettier --check"
.tools/node_modules/.bin/prettier --check --log-level warn \
  src/memlens/views/web/static/js src/memlens/views/report/templates/report.js \
  src/memlens/inspector/render/templates/dashboard.js tests/js
if command -v clang-format >/dev/null; then
    echo "== clang-format"; clang-format --dry-run -Werror $(find src/memlens -name "*.c" -o -name "*.h")
else
    echo "== clang-format: not installed (pip install clang-format), skipped"
fi
# ASan+UBSan over the compiled reader and replay, and their C line coverage (about 9
# minutes on a loaded 2-core machine; issue 24/27)
if [ "${MEMLENS_SKIP_SANITIZE:-}" != "1" ]; then
    echo "== sanitizers"; bash scripts/sanitize.sh
fi
echo "== wheel"
dist="$(mktemp -d)"
trap 'rm -rf "$dist"' EXIT
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$dist" . >/dev/null
python3 scripts/check_wheel.py "$dist"/memlens-*.whl

#!/usr/bin/env bash
# The maintainer checks CI runs besides the tests: lint, formatting, types and the wheel's
# contents. Run after scripts/setup.sh (scripts/test.sh does it) so the dev tools are there.
#
#   scripts/check.sh          everything (the sanitizer run is the longest part)
#   scripts/check.sh --fast   the local gate before a commit, seconds: lint, formatting
#                             (Python, C, JS), the JS types, and the repeated code the change
#                             adds; .pre-commit-config.yaml runs it
#   scripts/check.sh --static lint, formatting, types (mypy) and dead code: reads the tree,
#                             builds nothing, so .ci/run runs it beside the tests
#   scripts/check.sh --build  the rest: the sanitizer run and the wheel (.ci/run, after)
set -euo pipefail
cd "$(dirname "$0")/.."

fast=0 static=1 build=1
case "${1:-}" in
    "") ;;
    --fast) fast=1 ;;
    --static) build=0 ;;
    --build) static=0 ;;
    *) echo "usage: scripts/check.sh [--fast|--static|--build]" >&2; exit 2 ;;
esac

# every JS file we ship or test; `.tools/node_modules/.bin/prettier --write` with these
# paths formats them
JS_PATHS=(src/memlens/views/web/static/js src/memlens/views/report/templates/report.js
          src/memlens/inspector/render/templates/dashboard.js tests/js)
TOOLS=.tools/node_modules/.bin  # scripts/setup.sh installs tsc and prettier there

if [ "$static" = 1 ]; then
    echo "== ruff check";          python3 -m ruff check .
    echo "== ruff format --check"; python3 -m ruff format --check .
    if command -v clang-format >/dev/null; then
        echo "== clang-format"; clang-format --dry-run -Werror $(find src/memlens -name "*.c" -o -name "*.h")
    else
        echo "== clang-format: not installed (pip install clang-format), skipped"
    fi
    # the viewer's ES modules against the API's answers (static/js/types.js), and the report's
    # and dashboard's scripts, strict; the flags are in jsconfig.json, which editors read too
    echo "== tsc (jsconfig.json)";  "$TOOLS/tsc" -p jsconfig.json
    echo "== prettier --check";     "$TOOLS/prettier" --check --log-level warn "${JS_PATHS[@]}"
    if [ "$fast" = 1 ]; then
        # the pairs of places sharing six or more lines where one side is this change's
        # (uncommitted, staged or not): a list to read, it never fails the gate
        if command -v duplicates >/dev/null; then
            echo "== duplicates --change"; duplicates --change --seconds 120
        fi
        exit 0
    fi

    # mypy over src and over tests, side by side (each run is one process on one core; cold,
    # each takes about two minutes of CPU, nearly all of it reading numpy's and torch's stubs),
    # each with a cache of its own (their settings differ, so a shared cache would be rebuilt
    # by each in turn). src's output is printed after the tests'.
    echo "== mypy; mypy tests"
    mypy_log="$(mktemp)"
    python3 -m mypy >"$mypy_log" 2>&1 &
    mypy_pid=$!
    tests_rc=0
    bash scripts/mypy_tests.sh || tests_rc=$?
    src_rc=0
    wait "$mypy_pid" || src_rc=$?
    echo "-- mypy (src)"; cat "$mypy_log"; rm -f "$mypy_log"
    if [ "$src_rc" != 0 ] || [ "$tests_rc" != 0 ]; then exit 1; fi
    echo "== dead code";           python3 scripts/deadcode.py
fi
if [ "$build" = 0 ]; then exit 0; fi
# ASan+UBSan over the compiled reader and replay, and their C line coverage (issue 24/27;
# about 9 minutes on a loaded 2-core machine on one pytest worker, now on two)
if [ "${MEMLENS_SKIP_SANITIZE:-}" != "1" ]; then
    echo "== sanitizers"; bash scripts/sanitize.sh
fi
echo "== wheel"
dist="$(mktemp -d)"
trap 'rm -rf "$dist"' EXIT
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$dist" . >/dev/null
python3 scripts/check_wheel.py "$dist"/memlens-*.whl

#!/usr/bin/env bash
# mypy over tests/ (scripts/check.sh). The tests import their helper modules as pytest puts
# them on sys.path (each test folder's own, e.g. `from view_fixtures import ...`), so every
# folder under tests/ is a package root here. Settings: scripts/mypy_tests.ini (--strict,
# except that test functions and fixtures may stay unannotated; the ini says why). The
# folders' own conftest.py files share one module name, so each is checked in a run of its
# own.
set -euo pipefail
cd "$(dirname "$0")/.."
export MYPYPATH
# tests/data/ holds the scripts GPU recordings were made with, kept as they ran: not checked
MYPYPATH="$(find tests -name '*.py' -not -path '*/__pycache__/*' -not -path 'tests/data/*' -printf '%h\n' | sort -u | paste -sd:)"
# a cache of its own: `python3 -m mypy` (src, other settings) uses .mypy_cache and may run
# at the same time (scripts/check.sh)
mypy=(python3 -m mypy --config-file scripts/mypy_tests.ini --cache-dir .mypy_cache/tests)
nested=(tests/*/conftest.py)
"${mypy[@]}" --exclude '^tests/[^/]+/conftest\.py$|^tests/data/' tests
for conftest in "${nested[@]}"; do
    "${mypy[@]}" --no-warn-unused-configs "$conftest"
done

#!/usr/bin/env bash
# mypy over tests/ (scripts/check.sh). The tests import their helper modules as pytest puts
# them on sys.path (each test folder's own, e.g. `from view_fixtures import ...`), so every
# folder under tests/ is a package root here. Mode: mypy's default (what is annotated is
# checked; unannotated test functions' bodies are not), not --strict as for src/ (issue 24
# leaves strict tests for later). The folders' own conftest.py files share one module name,
# so each is checked in a run of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
export MYPYPATH
MYPYPATH="$(find tests -name '*.py' -not -path '*/__pycache__/*' -printf '%h\n' | sort -u | paste -sd:)"
mypy=(python3 -m mypy --explicit-package-bases --no-warn-unused-configs)
nested=(tests/*/conftest.py)
"${mypy[@]}" --exclude '^tests/[^/]+/conftest\.py$' tests
for conftest in "${nested[@]}"; do
    "${mypy[@]}" "$conftest"
done

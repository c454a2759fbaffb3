#!/usr/bin/env bash
# Run memlens's main job on a default example: generate a realistic training-loop snapshot
# (real ones cannot ship), summarize it, and write the HTML report. It installs only what
# that needs (memlens from this checkout with its core dependencies, and the web extra
# for `memlens view`; no torch, no test tools, no Debian packages), and nothing when it is
# already there: a second run takes seconds. scripts/setup.sh installs everything else.
set -euo pipefail
cd "$(dirname "$0")/.."

# memlens of this checkout, importable with the web server? Then there is nothing to do.
if ! python3 - "$PWD/src" <<'EOF' 2>/dev/null
import sys
import memlens, numpy, click, rich, starlette, uvicorn  # noqa: F401
sys.exit(0 if memlens.__file__.startswith(sys.argv[1]) else 1)
EOF
then
  echo "demo: installing memlens from this checkout (core + web extra)"
  python3 -m pip install -q --disable-pip-version-check -e ".[web]"
fi

mkdir -p examples/out
memlens generate examples/out/example.pickle --events 200000 --layers 12
memlens summary examples/out/example.pickle
memlens report examples/out/example.pickle -o examples/out/example.html
echo
echo "report: examples/out/example.html   browse it live: memlens view examples/out/example.pickle"

#!/usr/bin/env bash
# Install everything memlens and its test suite need on a fresh Debian machine with
# Python 3.11 and pip (no venv needed). Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v tmux >/dev/null 2>&1 || need_apt+=(tmux)
command -v ffmpeg >/dev/null 2>&1 || need_apt+=(ffmpeg)
command -v node >/dev/null 2>&1 || need_apt+=(nodejs)   # the viewer's JS unit tests
command -v npm >/dev/null 2>&1 || need_apt+=(npm)        # installs tsc and prettier (below)
# zlib's header: the compiled snapshot reader inflates .pickle.gz itself (without it the
# optional extension is skipped and memlens falls back to the slower Python reader).
[ -f /usr/include/zlib.h ] || need_apt+=(zlib1g-dev)
# On a fresh machine the Debian packages (Chromium, ffmpeg, Node.js and npm: a few hundred
# packages) and the Python ones (below) are each minutes of download and unpacking: the
# Debian ones are installed in the background while pip runs. zlib's header first, in the
# foreground: the editable build below compiles against it.
apt_pid=""
apt_log="$(mktemp)"
trap 'rm -f "$apt_log"' EXIT
if [ "${#need_apt[@]}" -gt 0 ] && [ "${MEMLENS_SKIP_APT:-0}" != "1" ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  APT_INSTALL=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq)
  $SUDO apt-get update -qq
  if [ ! -f /usr/include/zlib.h ]; then "${APT_INSTALL[@]}" zlib1g-dev >/dev/null; fi
  rest=()
  for pkg in "${need_apt[@]}"; do [ "$pkg" = zlib1g-dev ] || rest+=("$pkg"); done
  if [ "${#rest[@]}" -gt 0 ]; then
    "${APT_INSTALL[@]}" "${rest[@]}" >"$apt_log" 2>&1 &
    apt_pid=$!
  fi
fi

# the dev tools (mypy, ruff, IPython, pytest...) at the versions of constraints-dev.txt, so
# that scripts/check.sh gives the same answer on every machine
PIP="python3 -m pip install -q --disable-pip-version-check -c constraints-dev.txt"
# torch is optional for memlens itself (record/simulate/inspect only). The pinned CPU
# build comes from a local file on these machines; never let pip pick a CUDA build.
python3 -c "import torch" 2>/dev/null || $PIP "torch==2.13.0"
# skipped when nothing would change (scripts/setup_current.py says what it checks): the
# editable build alone is about 30 s of CPU. pip keeps its download cache (~/.cache/pip)
# for the runs that do install.
python3 scripts/setup_current.py || $PIP -e ".[dev]"
if [ -n "$apt_pid" ] && ! wait "$apt_pid"; then
  cat "$apt_log" >&2
  echo "memlens setup: apt-get install ${rest[*]} failed" >&2
  exit 1
fi
# the TypeScript compiler (type-checks the viewer's JavaScript) and prettier (formats every
# JS file), only for scripts/check.sh: into .tools/ (git-ignored), never a global install,
# at the pinned versions (the tests do not need them: a failed download is said, and
# check.sh then fails on it)
JS_TOOLS=(typescript@5.9.3 prettier@3.10.1)
have_js_tools() {
  local tool
  for tool in "${JS_TOOLS[@]}"; do
    [ "$(node -p "require('./.tools/node_modules/${tool%@*}/package.json').version" 2>/dev/null)" = "${tool#*@}" ] ||
      return 1
  done
}
have_js_tools ||
  npm install --silent --no-audit --no-fund --prefix .tools "${JS_TOOLS[@]}" ||
  echo "memlens setup: could not install ${JS_TOOLS[*]}; scripts/check.sh needs them" >&2

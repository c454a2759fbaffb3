#!/usr/bin/env bash
# A torchtitan directory for another torch release's venv (the opt-in torch matrix,
# scripts/torch_matrix.sh): the packages scripts/setup_sim_trainers.sh installed, linked
# into OUT, less what that venv must take from itself, plus what it lacks:
#
#   bash scripts/sim_trainers_for_venv.sh VENV [SRC] [OUT]
#   MEMLENS_TORCH_VENV=VENV MEMLENS_SIM_TRAINERS_PATH=OUT PYTHONPATH=OUT \
#     scripts/torch_matrix.sh 2.15.0 tests/simulate/test_simulate_torchtitan.py -k debug_model_state
#
# SRC: setup_sim_trainers.sh's directory (default .tools/sim-trainers); OUT: default
# .tools/sim-trainers-<the venv's torch>. Left out:
# - triton, when the venv has its own: a CUDA build of torch pins the triton it was built
#   with (2.15.0: 3.9), and OUT comes first on the path;
# - torchao, when it does not import beside the venv's torch and triton (0.18.0 under
#   triton 3.9: "key contains names that are not kernel arguments"): torchtitan imports
#   it at start-up catching only ImportError, so it would stop torchtitan (as on a GPU);
#   without it the float8 test skips.
# Linked in from this environment (the venv has torch and the test tools only): tokenizers
# (the test's assets) and what datasets, pandas and huggingface_hub import from it, each
# with its .dist-info.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:?usage: scripts/sim_trainers_for_venv.sh VENV [SRC] [OUT]}"
src="$(cd "${2:-.tools/sim-trainers}" && pwd)"
py="$venv/bin/python"
version="$("$py" -c 'import torch; print(torch.__version__.split("+")[0])')"
out="${3:-.tools/sim-trainers-$version}"
rm -rf "$out" && mkdir -p "$out" && out="$(cd "$out" && pwd)"

venv_has_triton=0
"$py" -c "import triton" 2>/dev/null && venv_has_triton=1
for f in "$src"/*; do
  case "${f##*/}" in
    triton | triton-*) [ "$venv_has_triton" = 1 ] && continue ;;
  esac
  ln -s "$f" "$out/"
done

site="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
modules=(tokenizers dateutil six.py pytz tzdata pyarrow requests urllib3 httpx httpcore h11
  idna certifi anyio sniffio tqdm charset_normalizer hf_xet)
dists=(tokenizers python_dateutil six pytz tzdata pyarrow requests urllib3 httpx httpcore h11
  idna certifi anyio sniffio tqdm charset_normalizer hf_xet)
for m in "${modules[@]}"; do
  if [ -e "$site/$m" ] && [ ! -e "$out/$m" ]; then ln -s "$site/$m" "$out/"; fi
done
for d in "${dists[@]}"; do
  for info in "$site"/"$d"-*.dist-info; do
    if [ -e "$info" ] && [ ! -e "$out/${info##*/}" ]; then ln -s "$info" "$out/"; fi
  done
done

# imported as torchtitan imports them: in a simulation, where CUDA is available (torchao
# defines its triton kernels only then, and 0.18.0's fail under triton 3.9 at that point)
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
imports() {
  printf '%s\n' "$@" >"$probe/probe.py"
  PYTHONPATH="$out:$PWD/src" "$py" -m memlens simulate -o "$probe/out" "$probe/probe.py" \
    >"$probe/log" 2>&1
}
if ! imports "import torchao.prototype.moe_training"; then
  rm -f "$out"/torchao "$out"/torchao-*
  echo "sim_trainers_for_venv: torchao does not import beside torch $version: left out (float8 skips)"
fi
if ! imports "import torchtitan.train"; then
  tail -5 "$probe/log" >&2
  echo "sim_trainers_for_venv: torchtitan.train does not import in $venv" >&2
  exit 1
fi
echo "sim_trainers_for_venv: torch $version's torchtitan directory: MEMLENS_SIM_TRAINERS_PATH=$out PYTHONPATH=$out"

#!/usr/bin/env bash
# The GPU check: one prepared script, under 5 minutes on a machine with one GPU and many cores.
# Runs benchmarks/gpu_check.py (it prints JSON) with .venv's Python. Without .venv: if the checkout holds .whl/
# (benchmarks/gpu_kit.py's wheels, for a machine that cannot reach a package index), the machine's python3,
# which must have torch, with those wheels installed beside it; else a new .venv, set up as `make` does.
#   benchmarks/gpu_check.sh                 # CUDA if PyTorch sees it, else CPU
#   SECONDS_PER_RUN=20 benchmarks/gpu_check.sh
#   benchmarks/gpu_check.sh --end-to-end deep/central
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
if [ ! -x "$PY" ]; then
  if [ -d .whl ]; then
    # Into a folder of their own, not the image's packages; the checkout itself is imported from here.
    SITE="${TMPDIR:-/tmp}/pronghorn-site"
    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" .whl/*.whl
    export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
    PY=python3
  else
    python3 -m venv .venv
    .venv/bin/pip install -q -e '.[envpool]'   # brings the torch build the machine has (CUDA where there is one)
  fi
fi
exec timeout 290 "$PY" benchmarks/gpu_check.py --seconds "${SECONDS_PER_RUN:-30}" "$@"

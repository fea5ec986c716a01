#!/usr/bin/env bash
# The GPU check: one prepared script, under 5 minutes on a machine with one GPU and many cores.
# Sets up .venv like `make` does if it is missing, then prints benchmarks/gpu_check.py's JSON.
#   benchmarks/gpu_check.sh                 # CUDA if PyTorch sees it, else CPU
#   SECONDS_PER_RUN=20 benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q -e '.[envpool]'   # brings the torch build the machine has (CUDA where there is one)
fi
exec timeout 290 .venv/bin/python benchmarks/gpu_check.py --seconds "${SECONDS_PER_RUN:-30}" "$@"
